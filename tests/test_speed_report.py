"""The speed report (crosscheck/speed/): exclusive stage timing, the reference's flags against norga's
small-task config, the combined rows and the report; timers that change no number of a run; the start-up cuts
(lazy SciPy and matplotlib) and the diagnostics' default."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crosscheck.speed import flags as speed_flags
from crosscheck.speed import stage_timer
from crosscheck.speed.report import combine
from crosscheck.speed.tables import markdown, summarise
from norga.config import load_config

REPO = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_stage_timer_charges_nested_calls_to_their_own_stage(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(stage_timer.time, "time", clock)
    timer = stage_timer.StageTimer(t0=90.0)

    def inner():
        clock.now += 3.0

    def outer():
        clock.now += 1.0
        timed_inner()
        clock.now += 2.0

    timed_inner = timer.wrap(inner, "statistics")
    timed_outer = timer.wrap(outer, lambda: "tii")
    timed_outer()
    timed_inner()
    record = timer.record()
    assert record["seconds"] == {"startup": 10.0, "tii": 3.0, "statistics": 6.0}
    assert record["calls"] == {"tii": 1, "statistics": 2} and record["wall"] == 19.0
    assert set(record["cpu"]) == {"startup", "tii", "statistics"} and min(record["cpu"].values()) >= 0
    with pytest.raises(ValueError, match="unknown stage"):
        timer.wrap(inner, "lunch")


def test_reference_flags_carry_the_values_of_norgas_small_task_config():
    c = load_config(REPO / "configs" / "crosscheck" / "norga.yaml")
    m = c.method
    s1, s2 = speed_flags.STAGE1, speed_flags.STAGE2
    assert (m.tii.lr, m.tii.align_lr, m.tii.align_epochs) == (s1["lr"], s1["ca_lr"], s1["crct_epochs"])
    assert (m.wtp.lr, m.tap.lr, m.tap.epochs) == (s2["lr"], s2["ca_lr"], s2["crct_epochs"])
    assert (m.wtp.momentum, m.wtp.reg, m.prompt_length) == (s2["prompt_momentum"], s2["reg"], s2["length"])
    assert m.tii.batch_size == m.wtp.batch_size == m.tii.samples_per_class == speed_flags.BATCH
    assert m.tap.batch_size == m.tap.samples_per_class == 5 * speed_flags.BATCH  # their 5 x batch_size
    assert m.tii.epochs == m.wtp.epochs == speed_flags.EPOCHS and c.data.num_tasks == speed_flags.TASKS
    assert m.gate == {"name": "norga", "activation": "tanh", **{k: v for k, v in m.gate.items()
                                                                 if k not in ("name", "activation")}}
    assert m.scale_lr_by_batch and m.tii.scale_align_lr and not m.diagnostics and c.eval_mask_unseen is False
    flags = speed_flags.reference_flags(1, Path("d.npz"), Path("w"), 40)
    assert "--train_inference_task_only" in flags and flags[flags.index("--seed") + 1] == "40"
    flags = speed_flags.reference_flags(2, Path("d.npz"), Path("w"), 40)
    assert flags[flags.index("--trained_original_model") + 1] == str(Path("w") / "stage1")


def test_rows_sum_processes_and_convert_the_references_percentages():
    records = [{"seconds": {"startup": 2.0, "tii": 5.0}},
               {"seconds": {"startup": 1.0, "wtp": 4.0, "evaluation": 1.0},
                "acc_matrix": [[50.0, 40.0], [0.0, 60.0]]}]
    row = combine("reference", 42, 2, records, [8.0, 7.0])
    assert row["wall"] == 15.0 and row["seconds"]["startup"] == 3.0
    assert row["seconds"]["other"] == pytest.approx(15.0 - 13.0)
    assert row["acc_matrix"] == [[0.5, 0.4], [None, 0.6]]
    ours = combine("norga", 42, 2, [{"seconds": {"startup": 1.0, "tii": 2.0}, "acc_matrix": [[0.5, 0.4], [None, 0.6]]}],
                   [5.0])
    report = summarise([row, ours], {"threads": 2, "seeds": [42], "date": "today"})
    assert report["speedup"] == pytest.approx(3.0) and report["FA_difference"] == pytest.approx(0.0)
    text = "\n".join(markdown(report))
    assert "3.00×" in text and "| reference | 42 | 15.0 | 50.00 |" in text


@pytest.mark.integration
def test_timed_norga_run_equals_the_plain_run(tmp_path):
    """The timers wrap functions and compute nothing: a timed run's metrics are the plain run's."""
    from conftest import SHORT_SMOKE, SMOKE
    from norga.engine import run_training

    plain = run_training(load_config(SMOKE, SHORT_SMOKE), tmp_path / "plain")
    sets = [f for s in SHORT_SMOKE for f in ("--set", s)]
    code = subprocess.call([sys.executable, "-m", "crosscheck.speed.norga_side", "--config", str(SMOKE), "--data",
                            "null", "--out", str(tmp_path / "timed"), "--seed", str(plain["seed"]), "--threads", "1",
                            "--timings", str(tmp_path / "t.jsonl"), *sets], cwd=REPO)
    assert code == 0
    timed = json.loads((tmp_path / "timed" / "metrics.json").read_text())
    assert timed["acc_matrix"] == plain["acc_matrix"] and timed["method"] == plain["method"]
    record = json.loads((tmp_path / "t.jsonl").read_text())
    assert {"startup", "tii", "wtp", "statistics", "tap", "evaluation", "diagnostics"} <= set(record["seconds"])
    assert sum(record["seconds"].values()) <= record["wall"] + 1e-6


def test_train_path_imports_neither_scipy_nor_matplotlib():
    code = ("import sys, norga.commands.cli, norga.engine.task_loop, norga.methods.hideprompt; "
            "print([m for m in ('scipy', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_diagnostics_are_off_by_default_and_on_in_the_smoke_and_benchmark_configs():
    assert load_config(REPO / "configs" / "cifar100_norga.yaml").method.diagnostics is False
    for config in ("smoke.yaml", "bench/evidence_cpu.yaml", "bench/cifar100_cpu.yaml", "bench/weak_cifar.yaml"):
        assert load_config(REPO / "configs" / config).method.diagnostics is True, config


def test_covariance_sampling_gives_the_values_of_the_plain_formula():
    """sample() = cat over classes of mean + z L^T (z ~ N(0, I) in float64 from the generator), then float32."""
    import torch
    from norga.toolkit.gaussian import GaussianStore

    store, g = GaussianStore("covariance"), torch.Generator().manual_seed(0)
    for c in (3, 7, 11):
        store.add(c, torch.randn(12, 16, generator=g) * (c + 1))
    got, labels = store.sample([7, 3, 11], 9, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    want = []
    for c in (7, 3, 11):
        z = torch.randn(9, 16, generator=g, dtype=torch.float64)
        want.append(store.stats[c]["mean"] + z @ store.stats[c]["chol"].T)
    assert torch.equal(got, torch.cat(want).float()) and got.dtype == torch.float32
    assert labels.tolist() == [7] * 9 + [3] * 9 + [11] * 9


def test_a_report_without_rows_says_what_to_run(tmp_path):
    from crosscheck.speed.tables import write_report

    write_report({"meta": {}, "sides": {}, "rows": []}, tmp_path / "r.json")
    text = (tmp_path / "r.md").read_text()
    assert "Not measured yet" in text and "crosscheck.speed.report --ref" in text and "|" not in text
