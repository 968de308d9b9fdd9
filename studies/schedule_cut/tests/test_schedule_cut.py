"""The quick GPU check's schedule-cut bench (studies/schedule_cut/run.py, issue #34): the cut is the manifest's, the
paired differences and the pre-registered range rule are the hand-computed ones, --write-expected refuses below 3
paired seeds and writes the hand-computed range with 3, and a --quick run finishes and resumes to nothing."""
from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import yaml

from norga.config import load_config
from norga.reproduce.manifest import load_manifest
from studies.conftest import REPO_ROOT
from studies.schedule_cut import report as rep
from studies.schedule_cut import run as sc

QUICK = REPO_ROOT / "configs" / "reproduce" / "quick_gpu.yaml"
PATHS = ["data.root=data.npz", "model.checkpoint=w.safetensors"]  # configs are only loaded here, never run
T_975_2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom (tables)


def manifest_copy(tmp_path, replace=()):
    """quick_gpu.yaml in tmp_path with absolute config paths and the (old, new) text replacements."""
    text = QUICK.read_text().replace("config: configs/", f"config: {REPO_ROOT}/configs/")
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "quick_gpu.yaml"
    path.write_text(text)
    return path


def test_the_cut_is_the_manifests_and_full_is_the_shipped_method(tmp_path):
    cells = sc.quick_cells(QUICK)
    assert sorted(cells) == ["hideprompt", "norga"]
    for method, cell in cells.items():
        shipped = load_config(cell.config_path, ["seed=40"]).method
        full, cut = (sc.run_config(cell, s, 40, PATHS, quick=False) for s in ("full", "cut"))
        assert full.method == shipped and full.seed == cut.seed == 40 and full.device == "cpu"
        assert (cut.method.tii.epochs, cut.method.wtp.epochs, cut.method.wtp.milestones) == (5, 10, [6])
        wtp = dataclasses.replace(cut.method.wtp, epochs=shipped.wtp.epochs, milestones=shipped.wtp.milestones)
        tii = dataclasses.replace(cut.method.tii, epochs=shipped.tii.epochs)
        assert dataclasses.replace(cut.method, wtp=wtp, tii=tii) == shipped  # nothing else of the method moves
        assert dataclasses.replace(cut, method=full.method) == full  # same data, class order, backbone: paired
    changed = sc.quick_cells(manifest_copy(tmp_path, [("method.tii.epochs=5", "method.tii.epochs=7")]))
    cfg = sc.run_config(changed["norga"], "cut", 40, PATHS, quick=False)
    assert cfg.method.tii.epochs == 7
    assert sc.tag(sc.settings(changed["norga"], "cut", False)) != sc.tag(sc.settings(cells["norga"], "cut", False))
    assert sc.settings(changed["norga"], "full", False) == sc.settings(cells["norga"], "full", False)


def test_an_override_the_analogue_cannot_apply_is_refused(tmp_path):
    path = manifest_copy(tmp_path, [("amp=bf16, data", "amp=bf16, model.preset=sup21k, data")])
    with pytest.raises(sc.ScheduleCutError, match=r"model.preset=sup21k.*GPU_PATH_KEYS"):
        sc.settings(sc.quick_cells(path)["hideprompt"], "cut", False)


def test_published_values_are_the_paper_manifests_and_match_the_quick_sources():
    for cell in sc.quick_cells(QUICK).values():
        published = rep.published_values(cell, REPO_ROOT / "configs" / "reproduce" / "paper.yaml")
        quoted = re.search(r"published FA ([\d.]+) ± ([\d.]+)", cell.source)
        assert published["FA"] == (float(quoted.group(1)), float(quoted.group(2)))
    assert published["CA"] == (95.83, 0.37) and published["FM"] == (1.44, 0.27)  # norga, Table 1


def rows_of(values, ctx, seeds):
    """Rows with the current settings from {(method, schedule): [(FA, CA, FM) per seed]}."""
    return [{"method": m, "schedule": s, "seed": seed, "FA": fa, "CA": ca, "FM": fm, "minutes": 1.0,
             "settings": ctx["current"][(m, s)]}
            for (m, s), per_seed in values.items() for seed, (fa, ca, fm) in zip(seeds, per_seed)]


FIXED = {("hideprompt", "full"): [(50, 60, 5), (52, 60, 6), (54, 60, 7)],
         ("hideprompt", "cut"): [(48, 58, 6), (49, 58, 7), (53, 58, 8)],
         ("norga", "full"): [(40, 50, 2), (40, 50, 2), (40, 50, 2)],
         ("norga", "cut"): [(41, 49, 3), (43, 49, 3), (42, 49, 3)]}


def test_paired_differences_and_the_range_rule_by_hand():
    ctx = sc.make_context(sc.quick_cells(QUICK), QUICK, False, [42, 40, 44])
    rows = rows_of(FIXED, ctx, [42, 40, 44])
    seeds, fa = rep.differences(rows, "hideprompt")["FA"]
    half = T_975_2 * 1.0 / math.sqrt(3)  # cut − full: −2, −3, −1: mean −2, std 1
    assert seeds == [40, 42, 44] and fa.mean == pytest.approx(-2.0) and fa.std == pytest.approx(1.0)
    assert (fa.low, fa.high) == pytest.approx((-2 - half, -2 + half))
    ranges = rep.derived_ranges(rows, ctx)
    # FA: [92.61 − 2 − 2.484 − 2·0.28, 92.61 − 2 + 2.484 + 2·0.28] = [87.566, 93.654], rounded outward
    assert ranges["hideprompt"]["FA"] == (87.5, 93.7)
    assert ranges["hideprompt"]["CA"] == (92.0, 92.1)  # −2 on every seed: [94.03 − 2 ∓ 0.02] = [92.01, 92.05]
    assert ranges["hideprompt"]["FM"] == (1.9, 3.1)  # +1 on every seed: [1.50 + 1 ∓ 0.56] = [1.94, 3.06]
    # norga FA: +1, +3, +2 -> mean 2, std 1: [94.48 + 2 − 2.484 − 0.26, 94.48 + 2 + 2.484 + 0.26] = [93.736, 99.224]
    assert ranges["norga"]["FA"] == (93.7, 99.3)
    # clipped to what FA can take: [99 + 0 − 2.484 − 1, 99 + 0 + 2.484 + 1] = [95.516, 102.484] -> [95.5, 100]
    assert rep.expected_range("FA", (99.0, 0.5), rep.describe([-1.0, 0.0, 1.0])) == (95.5, 100.0)
    assert rep.expected_range("FA", (99.9, None), rep.describe([4.0, 5.0, 6.0])) == (100.0, 100.0)  # null std: 0


def test_write_expected_refuses_below_three_seeds_and_writes_the_hand_computed_ranges(tmp_path):
    path = manifest_copy(tmp_path)
    ctx = sc.make_context(sc.quick_cells(path), path, False, [42, 40, 44])
    two = [r for r in rows_of(FIXED, ctx, [42, 40, 44]) if not (r["seed"] == 44 and r["method"] == "norga")]
    two = [r for r in two if not (r["seed"] == 44 and r["method"] == "hideprompt" and r["schedule"] == "cut")]
    before = path.read_text()
    with pytest.raises(rep.ReportError) as err:
        rep.write_expected(two, ctx)
    assert "hideprompt cut seed 44, norga full seed 44, norga cut seed 44" in str(err.value)
    assert "hideprompt full seed" not in str(err.value) and path.read_text() == before
    stale = [dict(r, settings=["other"]) for r in rows_of(FIXED, ctx, [42, 40, 44])]
    with pytest.raises(rep.ReportError, match="missing rows"):
        rep.write_expected(stale, ctx)  # rows of other settings do not count
    rows = rows_of(FIXED, ctx, [42, 40, 44])
    assert "Ready: `python -m studies.schedule_cut.run --write-expected`" in rep.markdown(rows, ctx)
    ranges = rep.write_expected(rows, ctx)
    after = sc.make_context(sc.quick_cells(path), path, False, [42, 40, 44])  # the manifest as written
    assert f"The manifest ({path}) holds the derived ranges." in rep.markdown(rows, after)
    assert ranges["hideprompt"] == {"FA": (87.5, 93.7), "CA": (92.0, 92.1), "FM": (1.9, 3.1)}
    written = {c.method: c.expected for c in load_manifest(path).cells}
    assert written == ranges
    old_lines, new_lines = before.splitlines(), path.read_text().splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert len(changed) == 2 and all(b.lstrip().startswith("expected:") for _, b in changed)
    assert "seeds 40, 42, 44" in changed[0][1]


def test_write_expected_refuses_quick_rows(tmp_path):
    path = manifest_copy(tmp_path)
    ctx = sc.make_context(sc.quick_cells(path), path, True, [42])
    with pytest.raises(rep.ReportError, match="--quick"):
        rep.write_expected([], ctx)



def test_lanes_merge_into_the_results_and_a_conflict_is_refused(tmp_path, capsys):
    """Two processes (one per method, each its own --results) merged: the report is the single-process one."""
    ctx = sc.make_context(sc.quick_cells(QUICK), QUICK, False, [42, 40, 44])
    rows = rows_of(FIXED, ctx, [42, 40, 44])
    for lane, method in (("a", "norga"), ("b", "hideprompt")):
        (tmp_path / f"{lane}.json").write_text(json.dumps([r for r in rows if r["method"] == method]))
    results = tmp_path / "cut"
    merge = ["--results", str(results), "--merge", str(tmp_path / "a"), str(tmp_path / "b")]
    assert sc.main(merge) == 0
    assert "12 rows added, 0 replaced, 12 in all" in capsys.readouterr().out
    merged = json.loads(results.with_suffix(".json").read_text())
    assert sorted(map(json.dumps, merged)) == sorted(map(json.dumps, rows))
    alone = tmp_path / "alone"
    rep.save(rows, alone, ctx)
    assert results.with_suffix(".md").read_text() == alone.with_suffix(".md").read_text()
    other = [dict(r, FA=r["FA"] + 1) if r["seed"] == 40 else r for r in rows if r["method"] == "norga"]
    (tmp_path / "a.json").write_text(json.dumps(other))
    assert sc.main(merge[:-1]) == 2
    assert "other values for norga cut seed 40, norga full seed 40; pass --replace" in capsys.readouterr().err
    assert sc.main(merge[:-1] + ["--replace"]) == 0
    with pytest.raises(SystemExit):
        sc.main(["--replace", "--report", "--results", str(results)])

@pytest.mark.integration
def test_quick_run_end_to_end_then_resume_does_nothing(tmp_path, monkeypatch):
    args = ["--quick", "--runs-dir", str(tmp_path / "runs"), "--results", str(tmp_path / "cut")]
    assert sc.main(args) == 0
    for config in (tmp_path / "runs").glob("*/config.yaml"):  # --quick trains the tiny ViT on synthetic data
        resolved = yaml.safe_load(config.read_text())
        assert resolved["data"]["name"] == "synthetic" and resolved["model"]["timm_kwargs"]["embed_dim"] == 16
    rows = json.loads((tmp_path / "cut.json").read_text())
    assert sorted((r["method"], r["schedule"], r["seed"]) for r in rows) == [
        ("hideprompt", "cut", 42), ("hideprompt", "full", 42), ("norga", "cut", 42), ("norga", "full", 42)]
    assert all(0 <= r["FA"] <= 100 and r["minutes"] > 0 for r in rows)
    report = (tmp_path / "cut.md").read_text()
    assert "| hideprompt | cut | 42 |" in report and "QUICK rows check the mechanism only" in report
    folders = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/metrics.json")}
    assert len(folders) == 4

    def no_training(*a, **k):
        raise AssertionError("a finished row was trained again")

    monkeypatch.setattr(sc, "run_one", no_training)
    assert sc.main(args) == 0
    assert json.loads((tmp_path / "cut.json").read_text()) == rows
    assert {p: p.stat().st_mtime_ns for p in folders} == folders


def test_the_committed_report_is_the_rows():
    """studies/schedule_cut/schedule_cut.md is what the committed rows and manifests give (the generator's --check)."""
    assert sc.main(["--check"]) == 0
