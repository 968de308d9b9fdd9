"""The report of ``studies.task_ablation.run`` (issue #33): the rule's tables (``studies/task_ablation/rule.py``) and
the diagnostics added while the grid ran, which read the same rows and change nothing in the rule.

Added on 2026-11-27, after 176 of the grid's 255 cells had run (marked so in the report):

* :func:`backbone_line`: which weights each regime's rows ran on (rows name their backbone from then on);
* :func:`regulariser_lines`: WTP's regulariser term per regime, form and task, from the rows' per-epoch values;
* :func:`source_lines`: level - base split into its two parts, ψ on prompted features and the frozen-feature
  probe. delta = TIL(ψ) - TIL(probe), and the probe is trained with WTP's epochs, lr and head-lr ratio (as
  pre-registered), so the levels that change those change the probe too: a level can raise delta by weakening
  the probe. :func:`probe_levels` names the levels whose probe differs from the base's.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from studies.task_ablation.grid import BASE, LEVELS
from studies.task_ablation.rule import (GRID_REGIMES, combination_lines, factor_lines, level_lines, mean_of,
                                        minus_base, paired_text, progress_lines, seed_deltas, verdict_lines)
from norga.reports.summary_stats import difference_text

PARTS = (("delta", "delta"), ("til_prompted", "ψ (prompted TIL)"), ("til_probe", "probe (frozen TIL)"))
ADDED = "added 2026-11-27 after 176 of 255 cells; not part of the rule"


def backbone_line(rows: List[dict], regime: str) -> str:
    """Which backbones the regime's rows name (``backbone``: sha256 of the weights, 16 hex digits), with row
    counts; rows from before backbones were recorded count as unrecorded."""
    counts = Counter(r.get("backbone") for r in rows if r["regime"] == regime)
    named = [f"`{b}` ({_rows_text(n)})" for b, n in sorted(counts.items(), key=lambda kv: str(kv[0])) if b]
    if counts[None]:
        named.append(f"unrecorded ({_rows_text(counts[None])}, from code before rows named their backbone)")
    return "Backbone (sha256 of the weights, first 16 hex digits): " + "; ".join(named) + "."


def _rows_text(n: int) -> str:
    return f"{n} row" + "s" * (n != 1)


def regulariser_form(row: dict) -> str:
    """Which regulariser a row's WTP used: ``eq56``, ``off`` (lambda = 0) or ``official`` (the authors' code)."""
    levels = row.get("combined") or [row["level"]]
    return "eq56" if "reg_eq56" in levels else "off" if "reg_off" in levels else "official"


def regulariser_lines(rows: List[dict]) -> List[str]:
    """Per regime, regulariser form and task: how large WTP's regulariser term was (its epoch means, from the rows'
    ``reg_curve``) next to the CE, so a form that does no work shows as one."""
    lines = ["| regime | form | task | cells | largest epoch mean | last epoch (mean) | CE last epoch (mean) |",
             "|---|---|---|---|---|---|---|"]
    groups: Dict[Tuple[str, str, int], List[dict]] = {}
    for r in rows:
        if r.get("reg_curve"):
            groups.setdefault((r["regime"], regulariser_form(r), int(r["task"])), []).append(r)
    for (regime, form, task), mine in sorted(groups.items()):
        largest = max((v for r in mine for v in r["reg_curve"]), key=abs)
        lines.append(f"| {regime} | {form} | {task} | {len(mine)} | {largest:.3g} | "
                     f"{mean_of(mine, 'reg_last'):.3g} | {mean_of(mine, 'ce_last'):.3g} |")
    return lines


def probe_differs(rows: List[dict], regime: str, level: str) -> bool:
    """Whether the level's probe accuracy differs from the base's on some seed both have (the probe sees the
    level's head recipe, and the global random state the training left)."""
    mine, base = (seed_deltas(rows, regime, lv, "til_probe") for lv in (level, BASE))
    return any(mine[s] != base[s] for s in set(mine) & set(base))


def probe_levels(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """The levels whose probe differs from the base's in some regime, in the grid's order."""
    return [lv for lv in LEVELS if lv != BASE and any(probe_differs(rows, r, lv) for r in regimes)]


def source_lines(rows: List[dict], regime: str) -> List[str]:
    """Per level of ``regime``: the paired level - base of delta, of ψ's TIL and of the probe's TIL (points)."""
    lines = ["| level | " + " | ".join(f"{name} − base" for _, name in PARTS) + " |", "|---" * 4 + "|"]
    for level in LEVELS:
        diffs = [minus_base(rows, regime, level, key) for key, _ in PARTS]
        if level != BASE and diffs[0] is not None:
            lines.append(f"| {level} | " + " | ".join(difference_text(d) for d in diffs) + " |")
    return lines


def probe_lines(rows: List[dict], regimes: Sequence[str] = GRID_REGIMES) -> List[str]:
    """docs: for the levels whose probe moves (:func:`probe_levels`), ψ − base and probe − base per regime."""
    levels = probe_levels(rows, regimes)
    if not levels:
        return []
    lines = [f"| level | {' | '.join(regimes)} |", "|---" * (len(regimes) + 1) + "|"]
    for level in levels:
        cells = []
        for regime in regimes:
            psi, probe = (minus_base(rows, regime, level, key) for key in ("til_prompted", "til_probe"))
            cells.append("–" if psi is None else f"ψ {difference_text(psi)}; probe {paired_text(probe)}")
        lines.append(f"| {level} | " + " | ".join(cells) + " |")
    return lines


def report_text(rows: List[dict], source: str) -> str:
    """The report (Markdown): progress and the verdict; per regime its backbone, the level table and where
    level - base comes from; which levels matter; the regulariser's size; the combination."""
    parts = [f"# Task-level ablation (issue #33)\n\nGenerated by `python -m studies.task_ablation.run --report` from "
             f"`{source}`; readout and rule: the docstrings of studies/task_ablation/run.py and "
             "studies/task_ablation/rule.py; the diagnostics added later: studies/task_ablation/report.py.\n"]
    if rows:
        parts.append("\n## Progress\n\n" + "\n".join(progress_lines(rows)) + "\n")
        parts.append("\n## Verdict\n\n" + "\n\n".join(verdict_lines(rows)) + "\n")
    for regime in sorted({r["regime"] for r in rows}):
        parts.append(f"\n## {regime}\n\n{backbone_line(rows, regime)}\n\n" + "\n".join(level_lines(rows, regime))
                     + f"\n\nWhere level − base comes from (pp, paired; {ADDED}):\n\n"
                     + "\n".join(source_lines(rows, regime)) + "\n")
    if rows:
        parts.append("\n## Which levels matter (level − base, pp, paired over seeds 1–5)\n\n"
                     + "\n".join(factor_lines(rows)) + "\n")
        parts.append(f"\n## The regulariser's size (WTP's epoch means, every level and seed; {ADDED})\n\n"
                     + "\n".join(regulariser_lines(rows)) + "\n")
        parts.append("\n## The combination (fresh seeds 6–10)\n\n" + "\n".join(combination_lines(rows)) + "\n")
    return "".join(parts)


def write_report(rows: List[dict], path: Path, source: str, check: bool = False) -> int:
    """Write :func:`report_text` to ``path``; with ``check`` only compare (1 when the file is stale)."""
    from studies.generated import write_or_check

    return write_or_check(path, report_text(rows, source), check)
