"""The generated tables that read a result file other than the evidence rows: the reference cross-check
(``bench/results/crosscheck_training.json``), the smoke run (``smoke.json``), the first CPU regime
(``cifar100_cpu.json``). Importing this module registers them in ``bench.table_blocks.BLOCKS``. (A study's
numbers reach its page as a ``file:`` block of the report its own generator writes: bench/table_blocks.py.)
"""
from __future__ import annotations

from typing import List

from bench import smoke_figures
from bench.crosscheck import training as crosscheck_training
from bench.row_merge import load_rows
from bench.table_blocks import BLOCK_MISSING, Results, block

CROSSCHECK_MISSING = "run `python -m bench.crosscheck.training --collect DIR` (docs/crosscheck.md, \"Repeat it\")"
BLOCK_MISSING["crosscheck-means"] = CROSSCHECK_MISSING
BLOCK_MISSING["crosscheck-l2p-per-task"] = CROSSCHECK_MISSING
BLOCK_MISSING["smoke-figures"] = "run `python -m bench.smoke_figures`"
BLOCK_MISSING["cifar100-dinov2-cpu"] = "run `python -m bench.real_data_cpu --regime cifar100_first`"


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

