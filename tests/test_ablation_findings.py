"""docs/results.md "What the grid shows" (issue #33): every number it quotes and every claim it makes about
which levels resolve, recomputed from the committed rows of studies/task_ablation/task_ablation.json."""
from __future__ import annotations

from pathlib import Path

import pytest

from studies.task_ablation import grid
from studies.task_ablation import rule
from bench.row_merge import load_rows
from bench.table_blocks import prose_interval as text, typographic
from norga.reports.summary_stats import describe, sign_of

REPO_ROOT = Path(__file__).resolve().parents[1]
KEYS = {"delta": "delta", "ψ": "til_prompted", "probe": "til_probe"}
# (regime, level, what) the section quotes as "`level` what <difference>" (level − base, paired)
QUOTED = [("weak_cifar", "lr_x0.1", "ψ"), ("weak_cifar", "head_lr_x0.1", "ψ"), ("weak_cifar", "epochs_x0.5", "ψ"),
          ("evidence", "epochs_x0.5", "ψ"), ("evidence", "aug_swap", "ψ"), ("cifar100_first", "epochs_x2", "ψ"),
          ("evidence", "lr_x10", "ψ"), ("cifar100_first", "head_lr_x10", "ψ"),
          ("cifar100_first", "epochs_x2", "probe"), ("weak_cifar", "lr_x0.1", "probe"), ("evidence", "lr_x10", "probe")]


@pytest.fixture(scope="module")
def rows():
    return load_rows(REPO_ROOT / "studies" / "task_ablation" / "task_ablation")


@pytest.fixture(scope="module")
def section():
    page = (REPO_ROOT / "docs" / "results.md").read_text()
    start = page.index("### What the grid shows")
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
    weak_psi, weak_probe = (rule.minus_base(rows, "weak_cifar", "lr_x10", key) for key in ("til_prompted", "til_probe"))
    assert f"and {text(weak_psi)} on weak_cifar, `head_lr_x10`" in section
    assert f"and {text(weak_probe)} on weak_cifar), so" in section


def test_ten_times_the_lr_lowers_psi_wherever_it_resolves(rows, section):
    """"Ten times the lr is too much everywhere it resolves": every resolved ψ difference of a ×10 level is
    negative, and the three the section quotes are all of them."""
    resolved = {(regime, level): sign_of(e) for level in ("lr_x10", "head_lr_x10") for regime in rule.GRID_REGIMES
                for e in [rule.minus_base(rows, regime, level, "til_prompted")] if sign_of(e) != 0}
    assert resolved == {("evidence", "lr_x10"): -1, ("weak_cifar", "lr_x10"): -1,
                        ("cifar100_first", "head_lr_x10"): -1}
    assert "Ten times the lr is too much everywhere it resolves" in section


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


def test_the_rules_combination_is_the_authors_setting_as_the_section_says(rows, section):
    """The grid is complete and no level is resolved above the base in two regimes: the rule keeps every factor
    at the base, and the section (written for the whole grid) says so."""
    assert not rule.missing_cells(rows)
    assert f"with all {rule.grid_total()} cells of the grid run" in section
    choice = rule.choose(rows)
    assert set(choice.values()) == {grid.BASE} and not grid.combination_levels(choice)
    assert "the rule's combination is the authors' setting itself." in section


def test_the_combination_on_fresh_seeds_as_the_section_quotes_it(rows, section):
    """The combination's delta on seeds 6-10 (one decimal, as the generated table): unresolved on evidence and on
    weak_cifar (the third backbone build), below the probe on cifar100_first, so it wins nowhere and the rule's
    decision is no recipe."""
    fresh = {regime: describe(list(rule.seed_deltas(rows, regime, grid.COMBINATION).values()))
             for regime in rule.GRID_REGIMES}
    assert {regime: e.n for regime, e in fresh.items()} == dict.fromkeys(rule.GRID_REGIMES, len(rule.FRESH_SEEDS))
    assert {regime: sign_of(e) for regime, e in fresh.items()} == {"evidence": 0, "weak_cifar": 0, "cifar100_first": -1}
    shown = {regime: typographic(rule.combination_text(e)) for regime, e in fresh.items()}
    assert (f"{shown['evidence']} on evidence and {shown['weak_cifar']} on weak_cifar (on the third "
            f"weak-backbone build, above), neither resolved, and {shown['cifar100_first']} on cifar100_first, "
            "below the probe") in section
    assert {r["backbone"] for r in rows if r["level"] == grid.COMBINATION and r["regime"] == "weak_cifar"} == \
        {"fcb5c24edfdffc52"}
    assert rule.decision(rows) is False
    assert "It beats the probe in no regime, so by the rule no recipe ships" in section
