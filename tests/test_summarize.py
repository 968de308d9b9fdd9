"""Seed aggregation on hand-made run folders: hand-computed mean/std/intervals, paired differences, refusals."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from conftest import REPO_ROOT as REPO
from norga.config import Config, config_to_dict
from norga.commands.summarize import group_name, main

T975_DF2 = 4.302652729749462  # Student t quantile 0.975, 2 degrees of freedom (tables: 4.303)
T975_DF1 = 12.706204736174694  # 1 degree of freedom (tables: 12.706)


def make_run(root: Path, name: str, seed: int, FA, CA, FM, BWT, til, tii, gate="norga", done=3, **cfg_changes):
    """A run folder as train.py leaves it (only the keys summarize reads); values are fractions."""
    run = root / name
    run.mkdir(parents=True)
    cfg = config_to_dict(Config())
    cfg["seed"], cfg["method"]["gate"] = seed, {"name": gate}
    for path, value in cfg_changes.items():
        *sections, key = path.split("__")
        node = cfg
        for section in sections:
            node = node[section]
        node[key] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    metrics = {"FA": FA, "CA": CA, "FM": FM, "BWT": BWT, "til_FA": til, "tii_accuracy": tii,
               "completed_tasks": done, "num_tasks": 3, "seed": seed}
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture
def runs(tmp_path):
    """Group A (seeds 1, 2, 3) and group B (seeds 1, 2, 4)."""
    a = [make_run(tmp_path, "norga_s1", 1, 0.50, 0.55, 0.10, -0.10, 0.80, [0.6, 0.8, 1.0]),
         make_run(tmp_path, "norga_s2", 2, 0.60, 0.65, 0.10, -0.05, 0.90, [0.5, 0.5, 0.5]),
         make_run(tmp_path, "norga_s3", 3, 0.70, 0.60, 0.10, -0.15, 0.85, [0.9, 0.9, 0.6])]
    b = [make_run(tmp_path, "hide_s1", 1, 0.48, 0.50, 0.20, -0.20, 0.80, [0.6, 0.6, 0.6], gate="linear"),
         make_run(tmp_path, "hide_s2", 2, 0.55, 0.60, 0.10, -0.10, 0.80, [0.5, 0.5, 0.5], gate="linear"),
         make_run(tmp_path, "hide_s4", 4, 0.99, 0.99, 0.00, 0.00, 0.99, [0.9, 0.9, 0.9], gate="linear")]
    return a, b


def rows(out: Path, kind: str, group: str = None) -> dict:
    table = csv.DictReader(io.StringIO((out / "summary.csv").read_text()))
    return {r["metric"]: r for r in table if r["kind"] == kind and (group is None or r["group"] == group)}


def run_main(args, capsys):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_mean_std_and_t_interval_by_hand(runs, tmp_path, capsys):
    out = tmp_path / "summary"
    code, text, _ = run_main([*runs[0], "--out", out], capsys)
    assert code == 0
    g = rows(out, "group", "norga")
    half = T975_DF2 * 10 / 3 ** 0.5  # FA: 50, 60, 70 -> mean 60, std 10
    assert float(g["FA"]["mean_pct"]) == pytest.approx(60.0)
    assert float(g["FA"]["std_pct"]) == pytest.approx(10.0)
    assert float(g["FA"]["ci95_low_pct"]) == pytest.approx(60 - half) == pytest.approx(35.15862)
    assert float(g["FA"]["ci95_high_pct"]) == pytest.approx(84.84138)
    assert (float(g["CA"]["mean_pct"]), float(g["CA"]["std_pct"])) == pytest.approx((60.0, 5.0))
    assert (float(g["FM"]["mean_pct"]), float(g["FM"]["std_pct"])) == pytest.approx((10.0, 0.0))
    assert float(g["FM"]["ci95_low_pct"]) == pytest.approx(10.0)  # no spread, no width
    assert (float(g["BWT"]["mean_pct"]), float(g["BWT"]["std_pct"])) == pytest.approx((-10.0, 5.0))
    assert (float(g["TIL FA"]["mean_pct"]), float(g["TIL FA"]["std_pct"])) == pytest.approx((85.0, 5.0))
    # TII accuracy per run = mean over tasks: 80, 50, 80 -> mean 70, std sqrt((10^2 + 20^2 + 10^2) / 2)
    assert (float(g["TII acc"]["mean_pct"]), float(g["TII acc"]["std_pct"])) == pytest.approx((70.0, 300 ** 0.5))
    assert g["FA"]["n"] == "3" and g["FA"]["seeds"] == "1 2 3"
    assert len(rows(out, "run")) == 6 and "paired" not in (out / "summary.csv").read_text()
    assert "norga (3 seeds: 1, 2, 3): FA 60.00 ± 10.00, CA 60.00 ± 5.00, FM 10.00 ± 0.00" in text
    assert "| FA | 3 | 60.00 | 10.00 | [35.16, 84.84] |" in text
    assert (out / "summary.md").read_text().strip() == text.split("wrote ")[0].strip()
    image = matplotlib.image.imread(out / "comparison.png")
    assert (out / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.shape[0] > 100


def test_paired_differences_over_common_seeds(runs, tmp_path, capsys):
    out = tmp_path / "vs"
    code, text, _ = run_main([*runs[0], "--vs", *runs[1], "--out", out], capsys)
    assert code == 0
    p = rows(out, "paired")
    # seeds 1 and 2 only; FA differences 50-48 = 2 and 60-55 = 5 -> mean 3.5, std sqrt(4.5)
    assert p["FA"]["seeds"] == "1 2" and p["FA"]["n"] == "2"
    assert float(p["FA"]["mean_pct"]) == pytest.approx(3.5)
    assert float(p["FA"]["std_pct"]) == pytest.approx(4.5 ** 0.5)
    half = T975_DF1 * 4.5 ** 0.5 / 2 ** 0.5  # = 12.706 * 1.5
    assert float(p["FA"]["ci95_low_pct"]) == pytest.approx(3.5 - half) == pytest.approx(-15.55931)
    assert float(p["FA"]["ci95_high_pct"]) == pytest.approx(22.55931)
    # FM: 10-20 = -10 and 10-10 = 0 -> mean -5, std sqrt(50)
    assert (float(p["FM"]["mean_pct"]), float(p["FM"]["std_pct"])) == pytest.approx((-5.0, 50 ** 0.5))
    assert "## norga − hide, paired by seed" in text and "method.gate.name ('norga' vs 'linear')" in text
    assert float(rows(out, "group", "hide")["FA"]["mean_pct"]) == pytest.approx((48 + 55 + 99) / 3)
    assert matplotlib.image.imread(out / "comparison.png").ndim == 3


def test_incomparable_runs_are_refused_naming_the_keys(runs, tmp_path, capsys):
    odd = make_run(tmp_path, "norga_s9", 9, 0.5, 0.5, 0.1, -0.1, 0.8, [0.5], method__wtp__epochs=7, data__num_tasks=5)
    code, text, err = run_main([*runs[0], odd], capsys)
    assert code == 2 and text == ""
    assert "not comparable" in err and "method.wtp.epochs" in err and "data.num_tasks" in err
    assert "norga_s9=7" in err and "norga_s1=50" in err  # each run's value
    assert "seed" not in err.split("differ in")[1].split("(pass")[0].replace("the seed", "")
    code, _, err = run_main([*runs[0], odd, "--ignore", "method.wtp.epochs", "--ignore", "data"], capsys)
    assert code == 0, err


def test_incomplete_runs_are_listed_and_excluded(runs, tmp_path, capsys):
    partial = make_run(tmp_path, "norga_s5", 5, 0.99, 0.99, 0.0, 0.0, 0.99, [1.0, 1.0], done=2)
    empty = tmp_path / "norga_s6"
    empty.mkdir()
    (empty / "config.yaml").write_text(yaml.safe_dump(config_to_dict(Config())))
    out = tmp_path / "summary"
    code, text, err = run_main([*runs[0], partial, empty, "--out", out], capsys)
    assert code == 0
    assert float(rows(out, "group")["FA"]["mean_pct"]) == pytest.approx(60.0)  # the 99% run is not averaged
    assert rows(out, "group")["FA"]["n"] == "3"
    assert "## Excluded runs" in text and "norga_s5" in text and "incomplete: 2/3 tasks completed" in text
    assert "norga_s6" in text and "no metrics.json" in text
    assert "excluded" in err
    code, _, err = run_main([partial, empty], capsys)
    assert code == 2 and "no complete run" in err


def test_repeated_seed_and_no_common_seed_are_refused(runs, tmp_path, capsys):
    twin = make_run(tmp_path, "norga_again", 1, 0.5, 0.5, 0.1, -0.1, 0.8, [0.5, 0.5, 0.5])
    code, _, err = run_main([*runs[0], twin], capsys)
    assert code == 2 and "seed(s) [1]" in err
    code, _, err = run_main([runs[0][2], "--vs", runs[1][2]], capsys)  # seeds 3 vs 4
    assert code == 2 and "no common seed" in err


def test_group_names_from_folders():
    assert group_name([Path("runs/c100_norga_s42"), Path("runs/c100_norga_s43")], "A") == "c100_norga"
    assert group_name([Path("x/norga-seed1"), Path("x/norga-seed2")], "A") == "norga"
    assert group_name([Path("x/alpha1"), Path("x/beta2")], "A") == "alpha +1 more"  # nothing shared: not 'A'
    assert group_name([Path("x/alpha1"), Path("x/beta2"), Path("x/gamma")], "A") == "alpha +2 more"
    assert group_name([Path("runs/norga_tanh/s42"), Path("runs/norga_tanh/s43")], "A") == "norga_tanh"  # parent
    assert group_name([Path("a/s42"), Path("b/s43")], "A") == "s42 +1 more"  # seed-only names, other parents
    assert group_name([Path("x/solo")], "A") == "solo"


def test_a_group_of_unrelated_folders_is_named_after_them_in_the_output(runs, tmp_path, capsys):
    a = runs[0]
    renamed = [a[0].rename(tmp_path / "first_try"), a[1].rename(tmp_path / "rerun")]
    code, text, _ = run_main(renamed, capsys)
    assert code == 0 and "## first_try +1 more" in text and "## A" not in text


def test_intervals_past_the_metric_range_are_clipped_and_explained(tmp_path, capsys):
    """2 seeds, FA 99 and 100: the t interval 99.5 ± 12.706 · 0.7071 / √2 = [93.15, 105.85] leaves [0, 100]."""
    a = [make_run(tmp_path, "hi_s1", 1, 0.99, 0.99, 0.00, 0.00, 0.99, [1.0, 1.0, 1.0]),
         make_run(tmp_path, "hi_s2", 2, 1.00, 1.00, 0.01, -0.02, 1.00, [1.0, 1.0, 0.97])]
    b = [make_run(tmp_path, "lo_s1", 1, 0.01, 0.02, 0.90, -0.90, 0.05, [0.0, 0.0, 0.0]),
         make_run(tmp_path, "lo_s2", 2, 0.00, 0.00, 0.99, -0.99, 0.00, [0.0, 0.0, 0.0])]
    out = tmp_path / "summary"
    code, text, _ = run_main([*a, "--vs", *b, "--out", out], capsys)
    assert code == 0
    half = T975_DF1 * 0.5  # std of (99, 100) = 0.7071 = 1/√2, divided by √2
    g = rows(out, "group", "hi")
    assert float(g["FA"]["ci95_low_pct"]) == pytest.approx(99.5 - half)
    assert float(g["FA"]["ci95_high_pct"]) == 100.0 and g["FA"]["ci95_clipped"] == "1"
    assert f"| FA | 2 | 99.50 | 0.71 | [{99.5 - half:.2f}, 100.00] † |" in text
    assert f"unclipped: FA [{99.5 - half:.2f}, {99.5 + half:.2f}]" in text  # the note gives the t interval
    low = rows(out, "group", "lo")
    assert float(low["FA"]["ci95_low_pct"]) == 0.0 and low["FA"]["ci95_clipped"] == "1"
    assert float(low["FM"]["ci95_high_pct"]) == 100.0  # FM 90, 99: 94.5 + 57.2 clipped to 100 points
    assert low["BWT"]["ci95_clipped"] == "1" and float(low["BWT"]["ci95_low_pct"]) == -100.0
    assert g["BWT"]["ci95_clipped"] == "0"  # -1 ± 12.71 is inside [-100, 100]: not touched
    p = rows(out, "paired")
    assert float(p["FA"]["ci95_high_pct"]) == 100.0 and p["FA"]["ci95_clipped"] == "1"  # 98.5 ± 12.7 · 0.71
    assert "a difference of two percentages lies in [−100, 100]" in text


def test_module_entry_point(runs):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "norga.commands.summarize", *map(str, runs[0])], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "FA 60.00 ± 10.00" in result.stdout


def test_the_figure_draws_the_clipped_interval(tmp_path, capsys, monkeypatch):
    import numpy as np

    from norga.reports import plot_compare

    drawn = {}
    monkeypatch.setattr(plot_compare, "save_png", lambda fig, path: drawn.setdefault("fig", fig) and path)
    a = [make_run(tmp_path, "hi_s1", 1, 0.99, 0.99, 0.00, 0.00, 0.99, [1.0, 1.0, 1.0]),
         make_run(tmp_path, "hi_s2", 2, 1.00, 1.00, 0.01, -0.02, 1.00, [1.0, 1.0, 0.97])]
    assert run_main([*a, "--out", tmp_path / "out"], capsys)[0] == 0
    titles = [ax.get_title() for ax in drawn["fig"].axes]
    assert {"FA (%)", "CA (%)", "FM (points)", "BWT (points)"} <= set(titles)  # FM, BWT: differences of accuracies
    fa = next(ax for ax in drawn["fig"].axes if ax.get_title() == "FA (%)")
    bar_ends = np.concatenate([np.ravel(seg)[1::2] for c in fa.collections for seg in c.get_segments()])
    assert bar_ends.max() == pytest.approx(100.0) and bar_ends.min() == pytest.approx(99.5 - T975_DF1 * 0.5)
