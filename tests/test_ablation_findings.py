"""docs/results.md "What the grid shows so far" (issue #33): every number it quotes and every claim it makes about
which levels resolve, recomputed from the committed rows of bench/results/task_ablation.json."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import ablation_grid as grid
from bench import ablation_rule as rule
from bench.row_merge import load_rows
from bench.table_blocks import prose_interval as text
from norga.summary_stats import describe, sign_of

REPO_ROOT = Path(__file__).resolve().parents[1]
KEYS = {"delta": "delta", "ψ": "til_prompted", "probe": "til_probe"}
# (regime, level, what) the section quotes as "`level` what <difference>" (level − base, paired)
QUOTED = [("weak_cifar", "lr_x0.1", "ψ"), ("weak_cifar", "head_lr_x0.1", "ψ"), ("weak_cifar", "epochs_x0.5", "ψ"),
          ("evidence", "epochs_x0.5", "ψ"), ("evidence", "aug_swap", "ψ"), ("cifar100_first", "epochs_x2", "ψ"),
          ("cifar100_first", "epochs_x2", "probe"), ("weak_cifar", "lr_x0.1", "probe")]


@pytest.fixture(scope="module")
def rows():
    return load_rows(REPO_ROOT / "bench" / "results" / "task_ablation")


@pytest.fixture(scope="module")
def section():
    page = (REPO_ROOT / "docs" / "results.md").read_text()
    start = page.index("### What the grid shows so far")
    return " ".join(page[start:page.index("\n## ", start)].split())


def test_the_base_deltas_quoted_are_the_rows_and_none_is_resolved(rows, section):
    for regime in rule.GRID_REGIMES:
        base = describe(list(rule.seed_deltas(rows, regime, grid.BASE).values()))
        assert base.n == len(rule.GRID_SEEDS) and sign_of(base) == 0
        assert f"base delta {text(base)} in {regime}" in section


def test_the_level_differences_quoted_are_the_rows(rows, section):
    for regime, level, what in QUOTED:
        e = rule.minus_base(rows, regime, level, KEYS[what])
        assert e.n == len(rule.GRID_SEEDS), (regime, level)
        assert f"`{level}` {what} {text(e)}" in section, (regime, level, what)
    cifar_probe = rule.minus_base(rows, "cifar100_first", "lr_x0.1", "til_probe")
    assert f"and {text(cifar_probe)} on cifar100_first" in section


def test_the_prompt_levels_resolve_nowhere_and_three_pairs_resolve_delta(rows, section):
    for level in ("init_small", "init_normal", "init_zero_values", "reg_eq56", "reg_off", "gate_linear",
                  "gate_sigmoid", "length_x2", "layers_all"):
        for regime in rule.GRID_REGIMES:
            e = rule.minus_base(rows, regime, level)
            assert e.n == len(rule.GRID_SEEDS) and sign_of(e) == 0, (regime, level)
    resolved = {(r, level) for level, by_regime in rule.level_diffs(rows).items() for r, e in by_regime.items()
                if e is not None and e.n == len(rule.GRID_SEEDS) and sign_of(e) != 0}
    assert resolved == {("evidence", "aug_swap"), ("evidence", "epochs_x0.5"), ("weak_cifar", "head_lr_x0.1")}
    assert "delta itself is resolved for three (regime, level) pairs only, one regime each" in section


def test_no_level_can_reach_two_regimes_as_the_section_says(rows, section):
    """cifar100_first and weak_cifar are complete; the levels resolved above there have complete evidence cells
    that are not resolved above, so the rule's combination is the base whatever evidence's missing cells show."""
    complete = ("cifar100_first", "weak_cifar")
    assert not rule.missing_cells(rows, complete)
    above = {level for level, by_regime in rule.level_diffs(rows, complete).items()
             if any(sign_of(e) > 0 for e in by_regime.values())}
    assert above == {"head_lr_x0.1"}
    evidence = rule.minus_base(rows, "evidence", "head_lr_x0.1")
    assert evidence.n == len(rule.GRID_SEEDS) and sign_of(evidence) <= 0
    assert "The rule's combination is therefore the authors' setting itself." in section


def test_the_section_names_the_cells_still_missing(rows, section):
    """The section's scope sentence: the cell count and the evidence levels still to run, as the rows have them
    (once the grid is complete this fails, and the section is rewritten for the whole grid)."""
    missing = rule.missing_cells(rows)
    total = rule.grid_total()
    assert missing and all(cell.startswith("evidence ") for cell in missing)
    running = [level for levels in grid.FACTORS.values() for level in levels
               if any(cell.split()[1] == level for cell in missing)]
    names = ", ".join(f"`{level}`" for level in running[:-1]) + f" and `{running[-1]}`"
    assert f"at {total - len(missing)} of {total} cells" in section
    assert f"(evidence's {names} cells are still to run)" in section
