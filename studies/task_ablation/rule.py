"""Statistics, the pre-registered decision rule and the report of ``studies.task_ablation.run`` (issue #33).

Rows are the bench's: ``{"regime", "level", "seed", "task", "delta", ...}`` with ``delta`` (a fraction) =
TIL(psi on prompted features right after WTP) - TIL(linear probe on frozen features), one row per task.

* :func:`seed_deltas`: per seed, the mean delta over the cell's tasks, in percentage points.
* A level *matters* in a regime when the 95% t interval of the paired (level - base) excludes 0.
* :func:`choose`: per factor (``studies.task_ablation.grid.FACTORS``), among its levels resolved *above* 0 in at least
  2 of the 3 grid regimes, the one with the largest mean (level - base); "mean" is read as the mean over the
  three regimes of each regime's mean paired difference (this reading written 2026-11-27, before any cell ran).
  None resolved: the factor stays at base. The rule needs every cell of the grid (3 regimes x (base + 16 levels)
  x seeds 1-5, both tasks) and names the missing ones otherwise.
* The combination runs on fresh seeds 6-10 and *wins* in a regime when its delta interval lies above 0; it is
  shipped as a recipe only when it wins in at least 2 of the 3 regimes (:func:`decision`).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from studies.task_ablation.grid import BASE, COMBINATION, FACTORS, LEVELS, combination_levels
from norga.reports.summary_stats import Estimate, describe, difference_text, paired, sign_of, table_head

TASKS = (0, 1)
GRID_REGIMES = ("evidence", "cifar100_first", "weak_cifar")
GRID_SEEDS = (1, 2, 3, 4, 5)
FRESH_SEEDS = (6, 7, 8, 9, 10)
WINS_NEEDED = 2  # regimes (of 3) the combination must win for a recipe, and the resolved-above count per level


class RuleError(ValueError):
    """The rule cannot be applied yet (cells missing)."""


def cell_rows(rows: List[dict], regime: str) -> Dict[Tuple[str, int], List[dict]]:
    """(level, seed) -> the rows of that cell of ``regime`` (one per task that has run)."""
    cells: Dict[Tuple[str, int], List[dict]] = {}
    for r in rows:
        if r["regime"] == regime:
            cells.setdefault((r["level"], r["seed"]), []).append(r)
    return cells


def seed_deltas(rows: List[dict], regime: str, level: str, key: str = "delta") -> Dict[int, float]:
    """Seed -> mean delta (or another accuracy ``key`` of the rows) over the tasks of (regime, level) in percentage
    points (seeds with every task only, whose rows all carry ``key``)."""
    return {seed: 100.0 * sum(r[key] for r in cell) / len(cell)
            for (lvl, seed), cell in cell_rows(rows, regime).items()
            if lvl == level and len(cell) == len(TASKS) and all(key in r for r in cell)}


def minus_base(rows: List[dict], regime: str, level: str, key: str = "delta") -> Optional[Estimate]:
    """The paired (level - base) of ``key`` over their common seeds, in points; None with fewer than two."""
    mine, base = seed_deltas(rows, regime, level, key), seed_deltas(rows, regime, BASE, key)
    if len(set(mine) & set(base)) < 2:
        return None
    return paired(mine, base)[1]


def grid_total(regimes: Sequence[str] = GRID_REGIMES) -> int:
    """The grid's cell count: regimes x levels (base included) x :data:`GRID_SEEDS`."""
    return len(regimes) * len(LEVELS) * len(GRID_SEEDS)


def missing_cells(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES,
                  seeds: Sequence[int] = GRID_SEEDS) -> List[str]:
    """The grid's (regime, level, seed) cells without a row for every task."""
    return [f"{regime} {level} seed {seed}" for regime in regimes for level in LEVELS
            for seed in seeds if seed not in seed_deltas(rows, regime, level)]


def choose(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> Dict[str, str]:
    """The rule's combination: factor -> chosen level (``base`` when none of its levels is resolved above 0 in at
    least :data:`WINS_NEEDED` regimes). Raises :class:`RuleError` naming missing cells."""
    missing = missing_cells(rows, regimes)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise RuleError(f"the decision rule needs the whole grid (seeds {list(GRID_SEEDS)}); {len(missing)} "
                        f"cells are missing: {shown}")
    choice = {}
    for factor, levels in FACTORS.items():
        scored = []
        for level in levels:
            diffs = [minus_base(rows, regime, level) for regime in regimes]
            if sum(sign_of(d) > 0 for d in diffs) >= WINS_NEEDED:
                scored.append((sum(d.mean for d in diffs) / len(diffs), level))
        choice[factor] = max(scored)[1] if scored else BASE
    return choice


def decision(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> Optional[bool]:
    """Whether the combination wins (delta interval above 0) in at least :data:`WINS_NEEDED` regimes; None while
    some regime has fewer than two fresh seeds of it."""
    per_regime = [list(seed_deltas(rows, r, COMBINATION).values()) for r in regimes]
    estimates = [describe(deltas) for deltas in per_regime if len(deltas) >= 2]
    if len(estimates) < len(regimes):
        return None
    return sum(sign_of(e) > 0 for e in estimates) >= WINS_NEEDED


# ---- report ----------------------------------------------------------------------------------------------
def level_lines(rows: List[dict], regime: str) -> List[str]:
    """The Markdown table of a regime: per level n, delta mean [95%], level - base [95%], CE, feature change."""
    lines = table_head("level", ["delta (pp) [95%]", "level − base (pp) [95%]", "CE first → last",
                                 "feature Δ trained / random"])
    for level in [*LEVELS, COMBINATION]:
        deltas = seed_deltas(rows, regime, level)
        if not deltas:
            continue
        est = describe(list(deltas.values()))
        interval = "–" if est.n < 2 else f"[{est.low:+.1f}, {est.high:+.1f}]"
        diff = None if level in (BASE, COMBINATION) else minus_base(rows, regime, level)
        vs = "–" if diff is None else difference_text(diff)
        mine = [r for r in rows if r["regime"] == regime and r["level"] == level]
        ce = f"{mean_of(mine, 'ce_first'):.2f} → {mean_of(mine, 'ce_last'):.2f}"
        feat = f"{mean_of(mine, 'feat_trained'):.3f} / {mean_of(mine, 'feat_random'):.3f}"
        lines.append(f"| {level} | {est.n} | {est.mean:+.1f} {interval} | {vs} | {ce} | {feat} |")
    return lines


def mean_of(rows: List[dict], key: str) -> float:
    """The mean of ``key`` over the rows that carry a value for it (NaN when none does)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else float("nan")


def progress_lines(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """Per regime: grid cells finished, the measured minutes per finished cell (sum over its tasks' ``minutes``, as
    the rows ran: one thread, beside another process) and the hours of one thread the missing cells would take at
    that rate."""
    per_regime = len(LEVELS) * len(GRID_SEEDS)
    lines = ["| regime | cells run | minutes per cell | hours left (one thread) |", "|---|---|---|---|"]
    for regime in regimes:
        done = per_regime - len(missing_cells(rows, (regime,)))
        whole = [sum(r["minutes"] for r in cell) for (level, _), cell in cell_rows(rows, regime).items()
                 if level in LEVELS and len(cell) == len(TASKS) and all("minutes" in r for r in cell)]
        rate = sum(whole) / len(whole) if whole else None
        left = "–" if rate is None else f"{(per_regime - done) * rate / 60:.1f}"
        lines.append(f"| {regime} | {done} of {per_regime} | {'–' if rate is None else f'{rate:.1f}'} | {left} |")
    return lines


def factor_lines(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """Which levels matter where: per level its factor, (level - base) per regime, and in how many regimes it is
    resolved above / below 0."""
    lines = [f"| factor | level | {' | '.join(regimes)} | above / below |", "|---" * (len(regimes) + 3) + "|"]
    for factor, levels in FACTORS.items():
        for level in levels:
            diffs = [minus_base(rows, r, level) for r in regimes]
            if all(d is None for d in diffs):
                continue
            signs = [0 if d is None else sign_of(d) for d in diffs]
            cells = " | ".join("–" if d is None else paired_text(d) for d in diffs)
            lines.append(f"| {factor} | {level} | {cells} | {signs.count(1)} / {signs.count(-1)} |")
    return lines if len(lines) > 2 else ["No level has two seeds paired with the base in any regime yet."]


def paired_text(d: Estimate, mark_resolved: bool = True) -> str:
    """``difference_text`` with the number of paired seeds while it is below the grid's (an interval of two
    seeds is wide and, when they happen to agree to the image, of zero width)."""
    seed_count = f" ({d.n} seeds)" if d.n < len(GRID_SEEDS) else ""
    return difference_text(d, mark_resolved) + seed_count


def combination_text(est: Estimate) -> str:
    """The combination's delta as its table shows it, in points to one decimal: "+m [+low, +high]" ("+m" alone
    for one seed)."""
    return f"{est.mean:+.1f}" + ("" if est.n < 2 else f" [{est.low:+.1f}, {est.high:+.1f}]")


def combination_lines(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """The rule's choice (once the grid is complete), the combination's delta per regime on the fresh seeds and
    the decision."""
    try:
        choice = choose(rows, regimes)
    except RuleError as err:
        return [f"Not yet: {err}."]
    levels = combination_levels(choice)
    head = f"The rule's combination: {', '.join(f'`{lv}`' for lv in levels)}." if levels else \
        f"The rule's combination is the base itself: no level is resolved above 0 in {WINS_NEEDED} regimes."
    lines = [head, ""]
    lines += table_head("regime", ["delta (pp) [95%]", "wins"])
    for regime in regimes:
        deltas = list(seed_deltas(rows, regime, COMBINATION).values())
        if not deltas:
            lines.append(f"| {regime} | 0 | not run | – |")
        else:
            est = describe(deltas)
            shown = combination_text(est)
            lines.append(f"| {regime} | {est.n} | {shown} | {'yes' if est.n >= 2 and sign_of(est) > 0 else 'no'} |")
    verdict = decision(rows, regimes)
    lines += ["", {None: "Decision: pending (the combination has not run on every regime).",
                   True: f"Decision: the combination wins in at least {WINS_NEEDED} regimes; by the rule it ships "
                         "as configs/recipes/small_data.yaml and runs on the full evidence benchmark.",
                   False: f"Decision: the combination wins in fewer than {WINS_NEEDED} regimes; no recipe is "
                          "shipped."}[verdict]]
    return lines


def verdict_lines(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """README: how much of the grid ran, the levels resolved above / below the base in at least
    :data:`WINS_NEEDED` regimes, the rule's combination and the decision; ``[]`` without rows."""
    if not rows:
        return []
    total = grid_total(regimes)
    done = total - len(missing_cells(rows, regimes))
    diffs = level_diffs(rows, regimes)
    counted = {level: [sign_of(d) for d in by_regime.values() if d is not None] for level, by_regime in diffs.items()}
    above = [f"`{lv}`" for lv, s in counted.items() if s.count(1) >= WINS_NEEDED]
    below = [f"`{lv}`" for lv, s in counted.items() if s.count(-1) >= WINS_NEEDED]
    lines = [f"Task-level ablation: {done} of {total} grid cells have run. Levels resolved above the authors' "
             f"setting (level − base, 95% interval) in at least {WINS_NEEDED} of the {len(regimes)} regimes: "
             f"{', '.join(above) or 'none'}; below it: {', '.join(below) or 'none'}.",
             single_regime_text(diffs)]
    if done < total:
        lines[0] += (" These counts use the seeds run so far (from two paired seeds on); the decision rule reads "
                     "only the complete grid.")
        return lines
    combination = combination_lines(rows, regimes)
    return lines + [combination[0], combination[-1]]


def level_diffs(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> Dict[str, Dict[str, Optional[Estimate]]]:
    """level -> regime -> (level - base) paired over seeds (:func:`minus_base`; None below two paired seeds), for
    every level of :data:`FACTORS`, in the grid's order."""
    return {level: {r: minus_base(rows, r, level) for r in regimes} for levels in FACTORS.values() for level in levels}


def single_regime_text(diffs: Dict[str, Dict[str, Optional[Estimate]]]) -> str:
    """One sentence naming the levels whose (level - base) interval excludes 0 in fewer than
    :data:`WINS_NEEDED` regimes, with the regime and the paired difference: what matters somewhere but not by the
    rule. ``diffs`` is :func:`level_diffs`."""
    parts = {1: [], -1: []}
    for level, by_regime in diffs.items():
        for sign in parts:
            where = [r for r, d in by_regime.items() if d is not None and sign_of(d) == sign]
            if 0 < len(where) < WINS_NEEDED:
                parts[sign] += [f"`{level}` in {r} ({paired_text(by_regime[r], mark_resolved=False)})"
                                for r in where]
    return (f"Resolved in fewer regimes than the rule asks: above the base {'; '.join(parts[1]) or 'none'}; below "
            f"it {'; '.join(parts[-1]) or 'none'}; for every level not named here or above, the interval "
            "includes 0 in every regime with paired seeds.")
