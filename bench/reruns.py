"""Evidence arms that were re-run, old rows beside new: the README's re-run table.

An arm is re-run when a change alters what its runs compute (e.g. after norga 0.2.0 the initial values of L2P,
DualPrompt, CODA-Prompt and RanPAC got a random stream of their own). Its earlier rows are never deleted; two labels in
``bench/results/evidence_cpu.json`` say which rows are which:

- ``<arm>@named_streams``: new rows of a re-run still under way. The arm's own name keeps the old rows, so every
  summary table still shows them (a table never mixes old and new seeds of one arm).
- ``<arm>@shared_stream``: the old rows of a re-run that is complete (all seeds of the regime). The arm's own name
  now holds the new rows.

:func:`rerun_lines` gives one table line per re-run arm: its re-run seeds, mean FA of the new and of the old rows
over those seeds, and the paired differences new − old (points, mean [95% t interval], over the same seeds).
"""
from __future__ import annotations

from typing import List, Tuple

from bench.real_data_cpu import by_seed as _by_seed
from norga.reports.summary_stats import describe, difference_text, paired, table_head

OLD_ROWS = "@shared_stream"  # old rows of a complete re-run
PENDING_ROWS = "@named_streams"  # new rows of a re-run under way
RERUN_COLUMNS = ("status", "new FA", "old FA", "new − old FA", "new − old TIL_FA")


def reruns(rows: List[dict], seeds_per_arm: int) -> List[Tuple[str, str, str, str]]:
    """(arm, label of the new rows, label of the old rows, status) per re-run arm, in first-seen order.

    A complete re-run needs exactly ``seeds_per_arm`` new seeds; an ``@shared_stream`` label beside fewer new seeds
    (or an arm with both labels) raises, since the arm's name would then mix old and new rows."""
    found: List[Tuple[str, str, str, str]] = []
    for arm in dict.fromkeys(r["run"].split("@")[0] for r in rows if "@" in r["run"]):
        complete, pending = any(r["run"] == arm + OLD_ROWS for r in rows), any(r["run"] == arm + PENDING_ROWS
                                                                                  for r in rows)
        if complete and pending:
            raise ValueError(f"{arm}: rows labelled both {arm}{OLD_ROWS} and {arm}{PENDING_ROWS}; once the re-run "
                             f"is complete its new rows take the name {arm!r} and the {PENDING_ROWS} label goes")
        if complete:
            new_seeds = len(_by_seed(rows, arm, "FA"))
            if new_seeds != seeds_per_arm:
                raise ValueError(f"{arm}: old rows are labelled {arm}{OLD_ROWS} but {arm!r} has {new_seeds} seeds, "
                                 f"not {seeds_per_arm}: a re-run is complete only with every seed")
            found.append((arm, arm, arm + OLD_ROWS, "complete: the tables show the new rows"))
        elif pending:
            done = len(_by_seed(rows, arm + PENDING_ROWS, "FA"))
            found.append((arm, arm + PENDING_ROWS, arm,
                          f"{done} of {seeds_per_arm} seeds: the tables show the old rows"))
    return found


def rerun_lines(rows: List[dict], seeds_per_arm: int = 5) -> List[str]:
    """The re-run table (markdown lines; empty when no arm was re-run). FA and TIL_FA in %, differences in
    points over the seeds both rows have."""
    lines = []
    for arm, new, old, status in reruns(rows, seeds_per_arm):
        new_fa, old_fa = _by_seed(rows, new, "FA"), _by_seed(rows, old, "FA")
        seeds, fa_diff = paired(new_fa, old_fa)
        _, til_diff = paired(_by_seed(rows, new, "TIL_FA"), _by_seed(rows, old, "TIL_FA"))
        means = [describe([d[s] for s in seeds]).mean for d in (new_fa, old_fa)]
        lines.append(f"| {arm} | {len(seeds)} | {status} | {means[0]:.2f} | {means[1]:.2f} | "
                     f"{_difference(fa_diff)} | {_difference(til_diff)} |")
    return table_head("arm", RERUN_COLUMNS) + lines if lines else []


def _difference(e) -> str:
    """difference_text, or the one difference itself for a single seed (no interval)."""
    return difference_text(e) if e.n > 1 else f"{e.mean:+.2f}"
