"""The pre-registered decision rule of issue #33's task-level ablation (studies/task_ablation/rule.py) on hand-built
rows, the combination's overrides (studies/task_ablation/grid.py), and ``studies.task_ablation.run --combination``
end to end with the cell's training replaced by a recorder."""
from __future__ import annotations

import json

import pytest

from norga.config import load_config
from studies.conftest import SMOKE
from studies.task_ablation import grid, rule
from studies.task_ablation import run as ta

JITTER = {1: 0.4, 2: -0.4, 3: 0.2, 4: -0.2, 5: 0.0, 6: 0.3, 7: -0.3, 8: 0.1, 9: -0.1, 10: 0.0}  # pp, mean 0


def _cell(regime, level, seed, delta_pp):
    """Both tasks of a cell with mean delta ``delta_pp`` (rows hold fractions; tasks differ by +-1 pp)."""
    return [{"regime": regime, "level": level, "seed": seed, "task": t, "delta": (delta_pp + d) / 100}
            for t, d in enumerate((1.0, -1.0))]


# level -> its (level - base) in pp per grid regime (evidence, cifar100_first, weak_cifar); unlisted levels: 0
OFFSETS = {"lr_x10": (10.0, 10.0, 0.0),     # resolved above in 2 regimes, mean +6.67: chosen for "prompt lr"
           "lr_x0.1": (5.0, 5.0, 5.0),      # resolved above in 3, but a smaller mean (+5)
           "gate_linear": (3.0, 0.0, 0.0),  # above in 1 regime only: the gate stays at base
           "init_small": (-4.0, -4.0, -4.0),
           "reg_off": (2.0, 0.0, 2.0)}      # above in 2: chosen for "regulariser"


def _grid_rows(skip=()):
    rows = []
    for i, regime in enumerate(rule.GRID_REGIMES):
        for level in grid.LEVELS:
            for seed in rule.GRID_SEEDS:
                if (regime, level, seed) in skip:
                    continue
                offset = OFFSETS.get(level, (0.0,) * 3)[i]
                # level - base per seed = offset + (jitter of the level) - (jitter of base): an interval around offset
                jitter = JITTER[seed] * (0.5 if level != "base" else 1.0)
                rows += _cell(regime, level, seed, -8.0 + offset + jitter)
    return rows


def test_every_level_but_base_belongs_to_exactly_one_factor():
    listed = [level for levels in grid.FACTORS.values() for level in levels]
    assert sorted(listed) == sorted(set(grid.LEVELS) - {grid.BASE}) and len(listed) == len(set(listed))


def test_the_rule_picks_per_factor_the_largest_mean_among_levels_resolved_in_two_regimes():
    rows = _grid_rows()
    assert rule.minus_base(rows, "evidence", "lr_x10").mean == pytest.approx(10.0)
    choice = rule.choose(rows)
    assert choice["prompt lr"] == "lr_x10"  # +6.67 mean over regimes beats lr_x0.1's +5.0
    assert choice["regulariser"] == "reg_off" and choice["gate"] == "base" and choice["prompt init"] == "base"
    assert grid.combination_levels(choice) == ["reg_off", "lr_x10"]  # FACTORS' order
    table = "\n".join(rule.factor_lines(rows))
    assert "| prompt lr | lr_x10 | +10.00 [" in table and "| 2 / 0 |" in table
    assert "seeds)" not in table  # the complete grid: every difference over all five seeds, no seed count shown
    assert "| prompt init | init_small | −" not in table and "| 0 / 3 |" in table  # typographic minus is render's


def test_the_rule_refuses_an_incomplete_grid_naming_the_cells():
    rows = _grid_rows(skip={("weak_cifar", "gate_sigmoid", 4)})
    with pytest.raises(rule.RuleError, match="1 cells are missing: weak_cifar gate_sigmoid seed 4"):
        rule.choose(rows)
    half = [r for r in _grid_rows() if not (r["regime"] == "evidence" and r["level"] == "base" and r["seed"] == 2
                                            and r["task"] == 1)]
    assert rule.missing_cells(half) == ["evidence base seed 2"]  # a seed needs both tasks
    assert rule.combination_lines(half)[0].startswith("Not yet: the decision rule needs the whole grid")


def test_the_combination_wins_where_its_interval_lies_above_zero():
    rows = _grid_rows()
    fresh = {"evidence": 3.0, "cifar100_first": 2.0, "weak_cifar": -1.0}
    combined = [r for regime, d in fresh.items() for s in rule.FRESH_SEEDS
                for r in _cell(regime, grid.COMBINATION, s, d + JITTER[s])]
    assert rule.decision(rows) is None and rule.decision(rows + combined[:2]) is None  # not run everywhere
    assert rule.decision(rows + combined) is True  # wins in evidence and cifar100_first
    lines = rule.combination_lines(rows + combined)
    assert lines[0] == "The rule's combination: `reg_off`, `lr_x10`."
    assert "| evidence | 5 | +3.0 [" in "\n".join(lines) and "| weak_cifar | 5 | -1.0 [" in "\n".join(lines)
    assert lines[-1].startswith("Decision: the combination wins in at least 2 regimes")
    one = [r for r in combined if r["regime"] != "cifar100_first"] + \
        [r for s in rule.FRESH_SEEDS for r in _cell("cifar100_first", grid.COMBINATION, s, JITTER[s])]
    assert rule.decision(rows + one) is False


def _without_offsets(rows, levels):
    """``rows`` with ``levels``' deltas equal to base's on every seed and task (nothing resolved for them)."""
    base = {(r["regime"], r["seed"], r["task"]): r["delta"] for r in rows if r["level"] == "base"}
    return [{**r, "delta": base[r["regime"], r["seed"], r["task"]]} if r["level"] in levels else r for r in rows]


def test_the_rule_with_no_level_resolved_keeps_the_base():
    flat = _without_offsets(_grid_rows(), set(grid.LEVELS) - {"base"})
    assert grid.combination_levels(rule.choose(flat)) == []
    assert rule.combination_lines(flat)[0].startswith("The rule's combination is the base itself")


def test_combined_overrides_apply_each_level_once():
    cfg = load_config(SMOKE)
    both = grid.combined_overrides(cfg, ["lr_x10", "gate_linear"])
    assert both == [f"method.wtp.lr={10 * cfg.method.wtp.lr}", "method.gate={name: linear}"]
    with pytest.raises(ValueError, match="one level per factor"):
        grid.combined_overrides(cfg, ["lr_x10", "lr_x0.1"])
    assert grid.combined_overrides(cfg, []) == []


def test_the_combination_runs_on_fresh_seeds_with_the_rules_levels(tmp_path, monkeypatch, capsys):
    import bench.regime_data

    grid_stem, results = tmp_path / "grid", tmp_path / "lane"
    grid_stem.with_suffix(".json").write_text(json.dumps(_grid_rows()))
    seen = []

    def fake_cell(cfg, tasks=rule.TASKS):
        seen.append(cfg)
        return [{"task": t, "delta": 0.05} for t in tasks]

    monkeypatch.setattr(bench.regime_data, "regime_extra", lambda regime, args: [])
    monkeypatch.setattr(ta, "run_cell", fake_cell)
    argv = ["--regime", "evidence", "--combination", "--grid", str(grid_stem), "--results", str(results)]
    assert ta.main(argv) == 0
    base = ta.cell_config(ta.REGIMES["evidence"], "base", 6, [], quick=False)
    assert [c.seed for c in seen] == list(rule.FRESH_SEEDS)
    assert seen[0].method.wtp.lr == pytest.approx(10 * base.method.wtp.lr) and seen[0].method.wtp.reg == 0.0
    rows = json.loads(results.with_suffix(".json").read_text())
    assert {r["level"] for r in rows} == {"combination"} and rows[0]["combined"] == ["reg_off", "lr_x10"]
    assert ta.main(argv) == 0 and len(seen) == 5  # resumable: every cell is there
    grid_stem.with_suffix(".json").write_text(json.dumps(_without_offsets(_grid_rows(), {"reg_off"})))
    with pytest.raises(SystemExit, match=r"evidence combination seed 6 already ran combining \['reg_off', 'lr_x10'\], "
                                         r"not \['lr_x10'\]"):
        ta.main(argv)
    grid_stem.with_suffix(".json").write_text(json.dumps([r for r in _grid_rows() if r["level"] != "reg_off"]))
    with pytest.raises(SystemExit, match="15 cells are missing: evidence reg_off seed 1"):
        ta.main(argv)
    with pytest.raises(SystemExit):
        ta.main([*argv, "--levels", "base"])


def test_the_readme_verdict_counts_the_grid_and_names_the_levels_that_matter():
    assert rule.verdict_lines([]) == []
    rows = _grid_rows()
    lines = rule.verdict_lines(rows)
    assert lines[0].startswith("Task-level ablation: 255 of 255 grid cells have run.")
    assert "in at least 2 of the 3 regimes: `reg_off`, `lr_x0.1`, `lr_x10`; below it: `init_small`." in lines[0]
    assert lines[1].startswith("Resolved in fewer regimes than the rule asks: above the base `gate_linear` in "
                               "evidence (+3.00 [") and lines[1].endswith(
        "; below it none; for every level not named here or above, the interval includes 0 in every regime with "
        "paired seeds.")
    assert lines[2] == "The rule's combination: `reg_off`, `lr_x10`."
    assert lines[3] == "Decision: pending (the combination has not run on every regime)."
    part = [r for r in rows if r["regime"] == "evidence"]
    assert rule.verdict_lines(part) == [
        "Task-level ablation: 85 of 255 grid cells have run. Levels resolved above the authors' setting (level − "
        "base, 95% interval) in at least 2 of the 3 regimes: none; below it: none. These counts use the seeds run "
        "so far (from two paired seeds on); the decision rule reads only the complete grid.",
        "Resolved in fewer regimes than the rule asks: above the base `reg_off` in evidence (+2.00 [+1.80, +2.20]); "
        "`lr_x0.1` in evidence (+5.00 [+4.80, +5.20]); `lr_x10` in evidence (+10.00 [+9.80, +10.20]); `gate_linear` "
        "in evidence (+3.00 [+2.80, +3.20]); below it `init_small` in evidence (-4.00 [-4.20, -3.80]); for every "
        "level not named here or above, the interval includes 0 in every regime with paired seeds."]


def test_a_row_keeps_wtps_curves_and_the_figure_averages_them(tmp_path):
    from studies.task_ablation import figure as fig

    d = {"task": 0, "til_prompted_before_tap": 0.5, "til_frozen_probe": 0.25, "til_prompted_after_tap": 0.5,
         "wtp_first": {"ce": 2.0, "reg": 0.1}, "wtp_last": {"ce": 1.0, "reg": 0.3}, "feature_change_trained": 0.4,
         "feature_change_random": 0.2, "prompt_change": 0.1}
    history = [{"loss": 2.1, "ce": 2.0, "reg": 0.1}, {"loss": 1.3, "ce": 1.2345678, "reg": 0.2},
               {"loss": 1.3, "ce": 1.0, "reg": 0.3}]
    row = ta.row_of(d, 90.0, history)
    assert row["delta"] == 0.25 and row["minutes"] == 1.5
    assert row["ce_curve"] == [2.0, 1.2346, 1.0] and row["reg_curve"] == [0.1, 0.2, 0.3]
    rows = [{"regime": "r", "level": "base", "seed": s, "task": 0, "ce_curve": c, "reg_curve": [0.0, 0.0]}
            for s, c in ((1, [2.0, 1.0]), (2, [4.0, 2.0]))]
    assert fig.mean_curve(rows, "r", "base", "ce_curve").tolist() == [3.0, 1.5]
    assert fig.mean_curve(rows, "r", "lr_x10", "ce_curve") is None
    assert fig.write_curves(rows, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert fig.write_curves([{**r, "ce_curve": []} for r in rows], tmp_path / "none.png") is None
    with pytest.raises(ValueError, match="ce_curve of different lengths"):
        fig.mean_curve([*rows, {**rows[0], "ce_curve": [1.0]}], "r", "base", "ce_curve")


def test_progress_counts_cells_per_regime_and_extrapolates_the_measured_minutes():
    rows = [dict(r, minutes=1.5) for r in _cell("weak_cifar", "base", 1, 0.0) + _cell("weak_cifar", "reg_off", 2, 0.0)]
    rows += [dict(r, minutes=4.0) for r in _cell("evidence", "base", 1, 0.0)]
    rows += [dict(r, minutes=9.0) for r in _cell("evidence", "base", 2, 0.0)[:1]]  # half a cell: not counted as run
    per_regime = len(grid.LEVELS) * len(rule.GRID_SEEDS)  # 17 levels x 5 seeds = 85
    lines = rule.progress_lines(rows)
    # weak_cifar: 2 cells of 2 x 1.5 min -> 3.0 min per cell; 83 missing -> 83 * 3 / 60 = 4.15 h
    assert f"| weak_cifar | 2 of {per_regime} | 3.0 | 4.2 |" in lines
    # evidence: one whole cell (2 x 4 = 8 min; the half cell does not count): 84 missing * 8 / 60 = 11.2 h
    assert f"| evidence | 1 of {per_regime} | 8.0 | 11.2 |" in lines
    assert f"| cifar100_first | 0 of {per_regime} | – | – |" in lines


def test_the_level_table_says_so_while_no_level_can_be_paired_with_the_base():
    rows = _cell("weak_cifar", "base", 1, 0.0) + _cell("weak_cifar", "reg_off", 1, 0.0)  # one seed: no interval
    assert rule.factor_lines(rows) == ["No level has two seeds paired with the base in any regime yet."]
    rows += _cell("weak_cifar", "base", 2, 0.0) + _cell("weak_cifar", "reg_off", 2, 0.0)
    # two seeds that agree exactly: a zero-width interval, shown with its seed count so it is not read as a finding
    assert "| regulariser | reg_off | – | – | +0.00 [+0.00, +0.00] (2 seeds) | 0 / 0 |" in rule.factor_lines(rows)


def test_paired_text_marks_a_resolved_difference_unless_the_prose_says_so_itself():
    from norga.reports.summary_stats import describe

    resolved, open_ = describe([1.0, 1.2, 1.4]), describe([-1.0, 1.0, 0.5])
    # mean 1.2, std 0.2, t(0.975, 2) = 4.303: half-width 4.303 * 0.2 / sqrt(3) = 0.497
    assert rule.paired_text(resolved) == "+1.20 [+0.70, +1.70] *resolved* (3 seeds)"
    assert rule.paired_text(resolved, mark_resolved=False) == "+1.20 [+0.70, +1.70] (3 seeds)"
    assert rule.paired_text(open_) == rule.paired_text(open_, mark_resolved=False) == "+0.17 [-2.42, +2.75] (3 seeds)"
