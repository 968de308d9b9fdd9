"""The generated tables that read a result file other than the evidence rows: the reference cross-check
(``bench/results/crosscheck_training.json``), the smoke run (``smoke.json``), the first CPU regime
(``cifar100_cpu.json``) and the task-level ablation (``task_ablation.json``). Importing this module registers
them in ``bench.table_blocks.BLOCKS``.
"""
from __future__ import annotations

from typing import List

from bench import ablation_report, ablation_rule, smoke_figures, task_ablation
from bench.crosscheck import training as crosscheck_training
from bench.row_merge import load_rows
from bench.table_blocks import BLOCK_MISSING, Results, block

CROSSCHECK_MISSING = "run `python -m bench.crosscheck.training --collect DIR` (docs/crosscheck.md, \"Repeat it\")"
BLOCK_MISSING["crosscheck-means"] = CROSSCHECK_MISSING
BLOCK_MISSING["crosscheck-l2p-per-task"] = CROSSCHECK_MISSING
BLOCK_MISSING["smoke-figures"] = "run `python -m bench.smoke_figures`"
BLOCK_MISSING["cifar100-dinov2-cpu"] = "run `python -m bench.real_data_cpu --regime cifar100_first`"
ABLATION_MISSING = "no cell of the task-level ablation has run (`python -m bench.task_ablation --regime R`)"
BLOCK_MISSING["ablation-verdict"] = ABLATION_MISSING
BLOCK_MISSING["ablation-levels"] = ABLATION_MISSING


@block("crosscheck-means", [])
def crosscheck_means(results: Results) -> List[str]:
    """docs/crosscheck.md: mean FA per side and norga − reference, from bench/results/crosscheck_training.json."""
    rows = crosscheck_training.load()
    return crosscheck_training.mean_lines(rows) if rows else []


def _crosscheck_per_seed(method: str):
    def table(results: Results) -> List[str]:
        rows = crosscheck_training.load()
        return crosscheck_training.per_seed_lines(rows, method) if rows else []
    return table


for _method in crosscheck_training.METHODS:
    BLOCK_MISSING[f"crosscheck-{_method}"] = CROSSCHECK_MISSING
    block(f"crosscheck-{_method}", [])(_crosscheck_per_seed(_method))


@block("crosscheck-l2p-per-task", [])
def crosscheck_l2p_per_task(results: Results) -> List[str]:
    """docs/crosscheck.md: L2P's accuracy per task, norga beside the reference, per seed."""
    rows = crosscheck_training.load()
    return crosscheck_training.per_task_lines(rows, "l2p") if rows else []


@block("smoke-figures", [])
def smoke_figures_block(results: Results) -> List[str]:
    """README / getting started: the smoke run's end line and times, from bench/results/smoke.json."""
    return smoke_figures.smoke_lines(smoke_figures.load())


@block("cifar100-dinov2-cpu", [])
def cifar100_dinov2_cpu(results: Results) -> List[str]:
    """docs/results.md: no committed result of that config; the nearest regime's rows (cifar100_cpu.json)."""
    return smoke_figures.dinov2_cpu_lines(load_rows(smoke_figures.FIRST_REGIME))


def _ablation_rows() -> List[dict]:
    """The ablation's committed rows (both ablation blocks use them)."""
    return load_rows(task_ablation.RESULTS)


@block("ablation-verdict", [])
def ablation_verdict(results: Results) -> List[str]:
    """README: the task-level ablation's progress, the levels that matter, the rule's pick and the decision."""
    return ablation_rule.verdict_lines(_ablation_rows())


@block("ablation-levels", [])
def ablation_levels(results: Results) -> List[str]:
    """docs/results.md: the grid's progress per regime, level − base per regime and level, for the levels that
    move the probe its two parts (ψ, probe), then the combination on fresh seeds."""
    rows = _ablation_rows()
    if not rows:
        return []
    probe = ablation_report.probe_lines(rows)
    split = ["The levels whose probe differs from the base's: level − base of ψ's TIL and of the probe's TIL "
             f"(pp, paired; {ablation_report.ADDED}).", "", *probe, ""] if probe else []
    return [*ablation_rule.progress_lines(rows), "", *ablation_rule.factor_lines(rows), "", *split,
            *ablation_rule.combination_lines(rows)]
