"""The task-level ablation bench of issue #33 (studies/task_ablation/run.py): every pre-registered level is a valid
config, the statistics are the hand-computed ones, and a cell's readout is the method's own diagnostics."""
from __future__ import annotations

import json
import math

import pytest

from bench.regimes import REGIMES
from bench.row_merge import load_rows
from norga.config import load_config
from studies.conftest import SMOKE
from studies.task_ablation import grid, report, rule
from studies.task_ablation import run as ta

EXTRA = ["data.root=data.npz", "model.checkpoint=w.pt"]  # never read: configs are only loaded here


@pytest.fixture(scope="module")
def grid_rows():
    """The committed rows of the grid and the combination, studies/task_ablation/task_ablation.json."""
    return load_rows(ta.RESULTS)


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_every_level_changes_exactly_what_it_names(regime):
    base = ta.cell_config(REGIMES[regime], "base", 3, EXTRA, quick=False)
    for level in grid.LEVELS:
        if level == "layers_all":
            continue  # builds the backbone: checked on the smoke config below
        cfg = ta.cell_config(REGIMES[regime], level, 3, EXTRA, quick=False)
        assert cfg.seed == 3 and (cfg == base) == (level == "base"), level
    lr = ta.cell_config(REGIMES[regime], "lr_x10", 3, EXTRA, quick=False)
    assert math.isclose(lr.method.wtp.lr, 10 * base.method.wtp.lr)
    epochs = ta.cell_config(REGIMES[regime], "epochs_x0.5", 3, EXTRA, quick=False)
    assert epochs.method.wtp.epochs == max(1, round(base.method.wtp.epochs / 2))
    swapped = ta.cell_config(REGIMES[regime], "aug_swap", 3, EXTRA, quick=False)
    assert "plain" in {swapped.data.transforms, base.data.transforms}
    assert swapped.data.transforms != base.data.transforms


def test_layers_all_prompts_every_block_of_the_backbone():
    cfg = load_config(SMOKE)
    assert grid.LEVELS["layers_all"](cfg) == ["method.prompt_layers=[0, 1]"]  # the smoke ViT has 2 blocks


def test_statistics_by_hand():
    rows = []
    for seed, (b0, b1, l0, l1) in {1: (0.10, 0.00, 0.20, 0.10), 2: (0.00, -0.10, 0.05, 0.05),
                                   3: (-0.20, 0.00, 0.00, 0.00)}.items():
        for level, deltas in (("base", (b0, b1)), ("lr_x10", (l0, l1))):
            rows += [{"regime": "r", "level": level, "seed": seed, "task": t, "delta": d, "ce_first": 2.0,
                      "ce_last": 1.0, "feat_trained": 0.5, "feat_random": 0.25} for t, d in enumerate(deltas)]
    rows.append({"regime": "r", "level": "lr_x0.1", "seed": 1, "task": 0, "delta": 0.5})  # task 1 missing
    base, lr = rule.seed_deltas(rows, "r", "base"), rule.seed_deltas(rows, "r", "lr_x10")
    assert base == pytest.approx({1: 5.0, 2: -5.0, 3: -10.0}) and lr == pytest.approx({1: 15.0, 2: 5.0, 3: 0.0})
    assert rule.seed_deltas(rows, "r", "lr_x0.1") == {}  # a seed counts only with both tasks
    lines = rule.level_lines(rows, "r")
    assert lines[2].startswith("| base | 3 | -3.3 [") and "| lr_x10 | 3 | +6.7 [" in lines[3]
    assert "| +10.00 [+10.00, +10.00] *resolved* |" in lines[3]  # lr_x10 - base = +10 on every seed
    assert "2.00 → 1.00" in lines[3] and "0.500 / 0.250" in lines[3]


@pytest.mark.integration
def test_a_cell_reads_the_methods_diagnostics():
    cfg = load_config(SMOKE, ["method.wtp.epochs=1", "method.tii.epochs=1", "method.tii.align_epochs=1",
                              "method.tap.epochs=1"])
    rows = ta.run_cell(cfg)
    assert [r["task"] for r in rows] == [0, 1]
    for r in rows:
        assert r["delta"] == pytest.approx(r["til_prompted"] - r["til_probe"])
        assert 0.0 <= r["til_probe"] <= 1.0 and r["ce_first"] > 0 and r["feat_random"] > 0
        assert len(r["ce_curve"]) == len(r["reg_curve"]) == cfg.method.wtp.epochs  # one value per WTP epoch
        assert r["ce_curve"][0] == pytest.approx(r["ce_first"], rel=1e-4)


def _cell_row(level, seed, task, delta):
    """A row as the bench writes it, with the fields ``--keep`` compares (TILs consistent with ``delta``)."""
    return {"regime": "evidence", "level": level, "seed": seed, "task": task, "delta": delta,
            "til_prompted": 0.5 + delta, "til_probe": 0.5, "til_after_tap": 0.5 + delta}


def test_lanes_merge_by_cell_and_conflicts_are_refused(tmp_path, capsys):
    results, a, b = tmp_path / "rows", tmp_path / "a", tmp_path / "b"
    results.with_suffix(".json").write_text(json.dumps([_cell_row("base", 1, 0, 0.1)]))
    a.with_suffix(".json").write_text(json.dumps([_cell_row("base", 1, 0, 0.1), _cell_row("base", 1, 1, 0.2)]))
    b.with_suffix(".json").write_text(json.dumps([_cell_row("lr_x10", 1, 0, -0.3), _cell_row("lr_x10", 1, 1, 0.0)]))
    assert ta.main(["--merge", str(a), str(b), "--results", str(results)]) == 0
    assert "3 rows added, 0 replaced, 4 in all" in capsys.readouterr().out
    rows = json.loads(results.with_suffix(".json").read_text())
    assert [(r["level"], r["task"]) for r in rows] == [("base", 0), ("base", 1), ("lr_x10", 0), ("lr_x10", 1)]
    assert "| lr_x10 | 1 |" in results.with_suffix(".md").read_text()
    a.with_suffix(".json").write_text(json.dumps([_cell_row("base", 1, 1, 0.25)]))  # task 1 of the cell, other value
    with pytest.raises(SystemExit, match="other values for evidence base seed 1 task 1; pass --replace"):
        ta.main(["--merge", str(a), "--results", str(results)])
    assert ta.main(["--merge", str(a), "--replace", "--results", str(results)]) == 0
    assert json.loads(results.with_suffix(".json").read_text())[1]["delta"] == 0.25
    a.with_suffix(".json").write_text(json.dumps([{**_cell_row("base", 1, 1, 0.25), "ce_last": 0.5}]))  # a re-run
    assert ta.main(["--merge", str(a), "--keep", "--results", str(results)]) == 0
    assert "0 rows added, 1 kept (re-run, results agree), 4 in all" in capsys.readouterr().out
    a.with_suffix(".json").write_text(json.dumps([_cell_row("base", 1, 1, 0.3)]))
    with pytest.raises(SystemExit, match=r"differ from the held ones in a result \(delta, til_prompted, til_probe, "
                                         r"til_after_tap\) for evidence base seed 1 task 1"):
        ta.main(["--merge", str(a), "--keep", "--results", str(results)])
    a.with_suffix(".json").write_text(json.dumps([_cell_row("lr_x3", 1, 0, 0.0)]))
    with pytest.raises(SystemExit, match="row evidence lr_x3 seed 1 task 0 names no level of studies.task_ablation"):
        ta.main(["--merge", str(a), "--results", str(results)])
    with pytest.raises(SystemExit):
        ta.main(["--replace", "--results", str(results)])


def test_rows_name_their_backbone_and_a_cell_is_not_resumed_onto_another(tmp_path, monkeypatch):
    """A new row carries the first 16 hex digits of its weights' sha256 (as metrics.json does); resuming the cell
    with other weights is refused, and rows written before backbones were recorded resume as before."""
    import hashlib
    import bench.regime_data

    weights = tmp_path / "w.pt"
    weights.write_bytes(b"first weights")
    monkeypatch.setattr(bench.regime_data, "regime_extra",
                        lambda regime, args: ["data.root=data.npz", f"model.checkpoint={weights}"])
    ran = []
    monkeypatch.setattr(ta, "run_cell", lambda cfg: ran.append(cfg.seed) or
                        [{"task": t, "delta": 0.1 * t} for t in ta.TASKS])
    results = tmp_path / "rows"
    argv = ["--regime", "weak_cifar", "--levels", "base", "--seeds", "1", "--results", str(results)]
    monkeypatch.setattr(ta, "write_curves", lambda rows, path: None)  # no figure for two fake rows
    assert ta.main(argv) == 0 and ran == [1]
    rows = json.loads(results.with_suffix(".json").read_text())
    assert {r["backbone"] for r in rows} == {hashlib.sha256(b"first weights").hexdigest()[:16]}
    assert ta.main(argv) == 0 and ran == [1]  # resumed: the cell is done
    weights.write_bytes(b"rebuilt weights")
    with pytest.raises(SystemExit, match=r"weak_cifar base seed 1 already ran on backbone [0-9a-f]{16}, not "
                                         r"[0-9a-f]{16} .*give these rows their own --results"):
        ta.main(argv)
    results.with_suffix(".json").write_text(json.dumps([{k: v for k, v in r.items() if k != "backbone"}
                                                        for r in rows]))
    assert ta.main(argv) == 0 and ran == [1]  # unrecorded rows: nothing to compare, the cell is done


def test_the_report_names_each_regimes_backbones():
    rows = [{"regime": "r", "backbone": "ab" * 8}] * 2 + [{"regime": "r"}] * 3
    rows.append({"regime": "s", "backbone": "cd" * 8})
    assert report.backbone_line(rows, "r") == ("Backbone (sha256 of the weights, first 16 hex digits): "
                                             f"`{'ab' * 8}` (2 rows); unrecorded (3 rows, from code before rows "
                                             "named their backbone).")
    assert report.backbone_line(rows, "s").endswith(f"`{'cd' * 8}` (1 row).")


def test_the_regulariser_table_groups_rows_by_the_form_their_wtp_used():
    def row(level, task, curve, **more):
        return {"regime": "r", "level": level, "task": task, "reg_curve": curve, "reg_last": curve[-1],
                "ce_last": 1.0, **more}

    rows = [row("base", 0, [0.0, 0.003, 0.0]), row("lr_x10", 0, [0.001, 0.0, 0.0]), row("reg_eq56", 1, [-0.3, -0.4]),
            row("combination", 1, [0.0, 0.0], combined=["reg_off", "lr_x10"]), row("base", 1, [2.0, 1.0])]
    assert [report.regulariser_form(r) for r in rows] == ["official", "official", "eq56", "off", "official"]
    assert report.regulariser_lines(rows)[2:] == ["| r | eq56 | 1 | 1 | -0.4 | -0.4 | 1 |",
                                                "| r | off | 1 | 1 | 0 | 0 | 1 |",
                                                "| r | official | 0 | 2 | 0.003 | 0 | 1 |",
                                                "| r | official | 1 | 1 | 2 | 1 | 1 |"]


def _split_rows():
    """Two seeds of base and two levels in regime r: lr_x10 moves the probe, init_small does not."""
    rows = []
    for seed, values in {1: {"base": (0.60, 0.70), "lr_x10": (0.50, 0.50), "init_small": (0.70, 0.70)},
                         2: {"base": (0.50, 0.60), "lr_x10": (0.50, 0.40), "init_small": (0.55, 0.60)}}.items():
        for level, (psi, probe) in values.items():
            rows += [{"regime": "r", "level": level, "seed": seed, "task": t, "til_prompted": psi,
                      "til_probe": probe, "delta": psi - probe} for t in rule.TASKS]
    return rows


def test_level_minus_base_splits_into_psi_and_probe_by_hand():
    rows = _split_rows()
    assert rule.seed_deltas(rows, "r", "lr_x10", "til_probe") == pytest.approx({1: 50.0, 2: 40.0})
    psi = rule.minus_base(rows, "r", "lr_x10", "til_prompted")  # -10, 0
    probe = rule.minus_base(rows, "r", "lr_x10", "til_probe")  # -20, -20
    assert (psi.mean, probe.mean) == pytest.approx((-5.0, -20.0))
    assert rule.minus_base(rows, "r", "lr_x10").mean == pytest.approx(psi.mean - probe.mean)
    assert report.probe_differs(rows, "r", "lr_x10") and not report.probe_differs(rows, "r", "init_small")
    assert report.probe_levels(rows, ("r",)) == ["lr_x10"]
    lines = report.source_lines(rows, "r")
    assert lines[2].startswith("| init_small | +7.50 [") and lines[2].endswith("| +0.00 [+0.00, +0.00] |")
    assert lines[3].startswith("| lr_x10 | +15.00 [") and "| -20.00 [-20.00, -20.00] *resolved* |" in lines[3]
    assert report.probe_lines(rows, ("r",))[2].startswith("| lr_x10 | ψ -5.00 [")


def test_only_the_levels_that_change_the_probes_recipe_or_test_transform_move_the_probe(grid_rows):
    """The committed rows: a level that changes neither WTP's head recipe (epochs, lr, head-lr ratio) nor the
    transforms leaves the frozen-feature probe identical to the base's on every seed."""
    moved = report.probe_levels(grid_rows)
    recipe = {"lr_x0.1", "lr_x10", "epochs_x0.5", "epochs_x2", "head_lr_x0.1", "head_lr_x10", "aug_swap"}
    assert set(moved) <= recipe and {"lr_x10", "head_lr_x10"} <= set(moved)


def test_the_committed_report_is_the_rows():
    """studies/task_ablation/task_ablation.md is what the committed rows give (the generator's --check)."""
    assert ta.main(["--check"]) == 0
