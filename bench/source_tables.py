"""The generated tables that read a result file other than the evidence rows: the reference cross-check
(``bench/results/crosscheck_training.json``), the smoke run (``smoke.json``), the first CPU regime
(``cifar100_cpu.json``) and the quick GPU check's manifest (its expected ranges). Importing this module
registers them in ``bench.table_blocks.BLOCKS``. (A study's numbers reach its page as a ``file:`` block of the
report its own generator writes: bench/table_blocks.py.)
"""
from __future__ import annotations

from typing import List

from bench import smoke_figures
from bench import crosscheck_tables as crosscheck_training
from bench.regimes import REPO
from bench.row_merge import load_rows
from bench.table_blocks import BLOCK_MISSING, Results, block

CROSSCHECK_MISSING = "run `python -m crosscheck.harness.training --collect DIR` (docs/crosscheck.md, \"Repeat it\")"
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



def _published(cell, paper_cells) -> tuple:
    """The published (mean, std) per metric of the paper manifest's cell matching ``cell`` (table, benchmark,
    backbone, method); a missing match raises naming the cell."""
    key = (cell.table, cell.benchmark, cell.backbone, cell.method)
    matches = [c.published for c in paper_cells if (c.table, c.benchmark, c.backbone, c.method) == key]
    if len(matches) != 1:
        raise ValueError(f"the paper manifest has {len(matches)} cells matching the quick cell {cell.id}; fix them")
    return matches[0]


@block("quick-gpu-expected", [])
def quick_gpu_expected(results: Results) -> List[str]:
    """docs/reproduce.md: the quick GPU check's expected ranges (``expected:`` of its manifest, which
    ``studies.schedule_cut.run --write-expected`` writes) beside the published full-schedule FA (paper.yaml)."""
    from norga.reproduce.manifest import DEFAULT_MANIFEST, QUICK_MANIFEST, load_manifest

    paper = load_manifest(REPO / DEFAULT_MANIFEST).cells
    lines = ["| method | FA (%) | CA (%) | FM (points) | published FA (full schedule) |", "|---|---|---|---|---|"]
    for cell in load_manifest(REPO / QUICK_MANIFEST).cells:
        spans = [f"{lo:.1f} – {hi:.1f}" for lo, hi in (cell.expected[m] for m in ("FA", "CA", "FM"))]
        mean, std = _published(cell, paper)["FA"]
        lines.append(f"| {cell.method} | " + " | ".join(spans) + f" | {mean:.2f} ± {std or 0:.2f} |")
    return lines
