"""Table helpers of the evidence rows and the generated tables of one group of arms.

A *group* is a set of arms shown together on docs/results.md, each compared with reference arms
(``no_prompt``, ``norga_tanh``, ``simplecil``): :func:`register_group` registers three blocks,
``<name>-arms`` (per-arm statistics), ``<name>-pairs`` (each arm − each reference, paired over seeds) and
``<name>-verdict`` (one sentence per reference). Numbers are percentages of the evidence rows
(``bench/results/evidence_cpu.json``), as in ``bench/results/evidence_cpu.md``.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from bench import real_data_cpu
from bench.table_blocks import Results, block
from norga.reports.summary_stats import sign_of, table_head

PAIR_COLUMNS = ("FA", "FM", "TIL_FA")


def arm_table(results: Results, names: Sequence[str]) -> List[str]:
    """The statistics table of the arms ``names`` that have rows, in that order."""
    arms = results.stats["arms"]
    return table_head("arm", real_data_cpu.STAT_COLUMNS) + [
        real_data_cpu.arm_stat_row(a, arms[a]) for a in names if a in arms]


def pair_table(results: Results, names: Sequence[str], columns=PAIR_COLUMNS) -> List[str]:
    """The paired-difference table (``columns``: FA, FM, TIL_FA unless told) of the pairs ``names`` that have
    rows, in that order; no lines when none has."""
    pairs = results.stats["pairs"]
    present = [n for n in names if n in pairs]
    return table_head("difference", columns) + [
        real_data_cpu.pair_stat_row(n, pairs[n], columns) for n in present] if present else []


def has_intervals(results: Results, names: Sequence[str]) -> bool:
    """Every pair in ``names`` is there with at least two seeds (an interval needs two)."""
    pairs = results.stats["pairs"]
    return all(n in pairs and len(pairs[n]["FA"][0]) >= 2 for n in names)


def verdicts(results: Results, metric: str, arms: Sequence[str], reference: str) -> str:
    """``above a, b; level c; below d`` for the ``arms``' paired ``metric`` − ``reference`` (95% interval)."""
    groups: Dict[str, List[str]] = {"above": [], "level": [], "below": []}
    for arm in arms:
        e = results.stats["pairs"][f"{arm} − {reference}"][metric][1]
        groups[{1: "above", 0: "level", -1: "below"}[sign_of(e)]].append(f"`{arm}`")
    return "; ".join(f"{word} {', '.join(arms)}" for word, arms in groups.items() if arms)


def register_group(name: str, label: str, arms: Sequence[str], references: Sequence[str]) -> None:
    """Register the blocks ``<name>-arms``, ``<name>-pairs`` and ``<name>-verdict`` of the group ``arms``.

    ``label``: how the verdict names the group ("the newer baselines"). The verdict covers the arms with an
    interval (two seeds or more) against every reference and names the arms it leaves out.
    """
    table_arms = [*references, *arms]

    @block(f"{name}-arms", table_arms)
    def arms_block(results: Results) -> List[str]:
        return arm_table(results, table_arms)

    @block(f"{name}-pairs", table_arms)
    def pairs_block(results: Results) -> List[str]:
        return pair_table(results, [f"{a} − {ref}" for ref in references for a in arms])

    @block(f"{name}-verdict", table_arms)
    def verdict_block(results: Results) -> List[str]:
        ready = [a for a in arms if has_intervals(results, [f"{a} − {ref}" for ref in references])]
        if not ready:
            return []
        lines = [f"Against `{ref}` {label} are in FA {verdicts(results, 'FA', ready, ref)}; "
                 f"given the task (TIL FA) {verdicts(results, 'TIL_FA', ready, ref)}." for ref in references]
        missing = ", ".join(f"`{a}`" for a in arms if a not in ready)
        left_out = f" Not yet in these sentences (fewer than 2 seeds): {missing}." if missing else ""
        return lines + ["(Paired over the seeds; *level*: the 95% interval includes 0; tables on each method's "
                        f"page.){left_out}"]
