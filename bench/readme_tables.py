"""The benchmark tables of the README and the docs pages, generated from the committed rows.

    python -m bench.readme_tables            # rewrite every marked table of README.md and docs/**/*.md
    python -m bench.readme_tables --check    # exit 1, naming the stale tables, if a file differs

A generated table sits between two HTML comments (invisible on GitHub)::

    <!-- bench:moe-arms -->
    | arm | seeds | ... |
    <!-- /bench:moe-arms -->

Each name is a registered block (``BLOCKS``): a function of the rows of ``bench/results/evidence_cpu.json``
(a :class:`Results`, whose statistics are computed once per render) returning table lines. Numbers are those of ``bench/results/evidence_cpu.md`` with typographic minus signs.
``tests/test_readme.py`` runs the check, so no page can fall behind the committed rows.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Dict, List

from bench import real_data_cpu, reruns, smoke_figures
from bench.crosscheck import training as crosscheck_training
from bench.moe_arms import routing_lines, routing_pair_lines
from bench.regimes import REPO
from norga.summary_stats import table_head


@dataclass
class Results:
    """The benchmark rows; ``stats`` is real_data_cpu.statistics() of the evidence regime, computed on first use."""

    rows: List[dict]

    @cached_property
    def stats(self) -> dict:
        return real_data_cpu.statistics(self.rows, real_data_cpu.REGIMES["evidence"])


BLOCKS: Dict[str, Callable[[Results], List[str]]] = {}
BLOCK_ARMS: Dict[str, List[str]] = {}  # the arms each table needs (named when it has no rows yet)
BLOCK_MISSING: Dict[str, str] = {}  # what to run when a table that does not read the evidence rows has no rows
MARKER = re.compile(r"<!-- bench:([\w-]+) -->\n(.*?)<!-- /bench:([\w-]+) -->", re.S)
MATCHED = ["lora_moe", "mh_moe", "lora_moe_k16_top5"]
H_SWEEP = ["mh_moe_h2", "mh_moe_h4", "mh_moe", "mh_moe_h8"]  # H = 2, 4, 6 (the backbone's heads), 8
HEADWISE = ["norga_headwise", "norga_tanh", "hideprompt"]
OVERVIEW = ["norga_tanh", "hideprompt", "no_prompt", "simplecil", "ranpac", "aper", "ease", "inflora", "sd_lora",
            "sprompt", "dualprompt", "l2p", "coda", "lora_moe", "mh_moe"]
PAIR_COLUMNS = ("FA", "FM", "TIL_FA")


def block(name: str, arms: List[str]):
    """Register a README table: ``@block("name", arms)`` on a function Results -> table lines (empty without
    rows)."""
    def register(fn):
        BLOCKS[name], BLOCK_ARMS[name] = fn, arms
        return fn
    return register


def _table(lines: List[str]) -> List[str]:
    return [ln for ln in lines if ln.startswith("|")]


def _arm_table(results: Results, names: List[str]) -> List[str]:
    """The statistics table of the arms ``names`` that have rows, in that order."""
    arms = results.stats["arms"]
    return table_head("arm", real_data_cpu.STAT_COLUMNS) + [
        real_data_cpu.arm_stat_row(a, arms[a]) for a in names if a in arms]


@block("evidence-overview", OVERVIEW)
def evidence_overview(results: Results) -> List[str]:
    return _arm_table(results, OVERVIEW)


@block("moe-arms", MATCHED)
def moe_arms(results: Results) -> List[str]:
    return _table(routing_lines(results.rows, MATCHED))


@block("moe-pairs", MATCHED)
def moe_pairs(results: Results) -> List[str]:
    return _table(routing_pair_lines(results.rows, [("mh_moe", "lora_moe"), ("mh_moe", "lora_moe_k16_top5")]))


@block("moe-vs-frozen", ["lora_moe", "mh_moe", "no_prompt"])
def moe_vs_frozen(results: Results) -> List[str]:
    pairs = {n: p for n, p in results.stats["pairs"].items() if n.endswith(" − no_prompt") and "moe" in n}
    return table_head("difference", PAIR_COLUMNS) + [
        real_data_cpu.pair_stat_row(n, p, PAIR_COLUMNS) for n, p in pairs.items()] if pairs else []


@block("h-sweep", H_SWEEP)
def h_sweep(results: Results) -> List[str]:
    return _table(routing_lines(results.rows, H_SWEEP))


@block("h-sweep-pair", ["mh_moe_h8", "mh_moe_h2"])
def h_sweep_pair(results: Results) -> List[str]:
    return _table(routing_pair_lines(results.rows, [("mh_moe_h8", "mh_moe_h2")]))


@block("headwise-arms", HEADWISE)
def headwise_arms(results: Results) -> List[str]:
    arms = results.stats["arms"]
    present = [a for a in HEADWISE if a in arms]
    return table_head("arm", real_data_cpu.STAT_COLUMNS) + [
        real_data_cpu.arm_stat_row(a, arms[a]) for a in present] if "norga_headwise" in present else []


@block("headwise-pairs", HEADWISE)
def headwise_pairs(results: Results) -> List[str]:
    pairs = {n: p for n, p in results.stats["pairs"].items() if n.startswith("norga_headwise − ")}
    return table_head("difference", real_data_cpu.STAT_COLUMNS) + [
        real_data_cpu.pair_stat_row(n, p) for n, p in pairs.items()] if pairs else []


SIMPLECIL_PAIRS = ["sprompt", "dualprompt", "l2p", "coda", "ranpac", "aper", "ease", "inflora", "sd_lora", "no_prompt"]


@block("baselines-vs-simplecil", SIMPLECIL_PAIRS + ["simplecil"])
def baselines_vs_simplecil(results: Results) -> List[str]:
    """Paired differences arm − simplecil (the prompt-free row of the published tables)."""
    pairs = results.stats["pairs"]
    names = [f"{a} − simplecil" for a in SIMPLECIL_PAIRS if f"{a} − simplecil" in pairs]
    return table_head("difference", PAIR_COLUMNS) + [
        real_data_cpu.pair_stat_row(n, pairs[n], PAIR_COLUMNS) for n in names] if names else []


PROMPT_BASELINES = ["sprompt", "l2p", "dualprompt", "coda"]
BASELINE_TABLE = ["no_prompt", "norga_tanh", *PROMPT_BASELINES]  # the arms of docs/results.md's baseline tables


@block("baselines-arms", BASELINE_TABLE)
def baselines_arms(results: Results) -> List[str]:
    """docs/results.md: the prompt baselines beside no_prompt and norga_tanh."""
    return _arm_table(results, BASELINE_TABLE)


@block("baselines-pairs", BASELINE_TABLE)
def baselines_pairs(results: Results) -> List[str]:
    """docs/results.md: each prompt baseline − no_prompt, then norga_tanh − each prompt baseline."""
    pairs = results.stats["pairs"]
    names = [n for n in [*(f"{a} − no_prompt" for a in PROMPT_BASELINES),
                         *(f"norga_tanh − {a}" for a in PROMPT_BASELINES)] if n in pairs]
    return table_head("difference", PAIR_COLUMNS) + [
        real_data_cpu.pair_stat_row(n, pairs[n], PAIR_COLUMNS) for n in names] if names else []


def method_evidence(arm: str) -> Callable[[Results], List[str]]:
    """A method page's table: the arm's statistics and its paired differences (regime.yaml's pairs of the arm)."""
    def table(results: Results) -> List[str]:
        arms, pairs = results.stats["arms"], results.stats["pairs"]
        if arm not in arms:
            return []
        mine = [n for n in pairs if n.startswith(f"{arm} − ")]
        return table_head("arm / difference", real_data_cpu.STAT_COLUMNS) + [
            real_data_cpu.arm_stat_row(arm, arms[arm])] + [real_data_cpu.pair_stat_row(n, pairs[n]) for n in mine]
    return table


for _arm in ("aper", "ease"):
    block(f"{_arm}-evidence", [_arm])(method_evidence(_arm))


LORA_ARMS = ["inflora", "sd_lora"]


@block("lora-pairs", LORA_ARMS + ["norga_tanh", "no_prompt", "simplecil"])
def lora_pairs(results: Results) -> List[str]:
    """Paired differences of the LoRA arms (InfLoRA, SD-LoRA) against norga_tanh, no_prompt and simplecil."""
    pairs = results.stats["pairs"]
    names = [n for n in pairs if n.split(" − ")[0] in LORA_ARMS]
    return table_head("difference", PAIR_COLUMNS) + [
        real_data_cpu.pair_stat_row(n, pairs[n], PAIR_COLUMNS) for n in names] if names else []


@block("evidence-reruns", [])
def evidence_reruns(results: Results) -> List[str]:
    """README: the re-run arms (bench/reruns.py), new rows beside the old ones they replace or will replace."""
    return reruns.rerun_lines(results.rows, seeds_per_arm=len(real_data_cpu.REGIMES["evidence"].seeds))


BLOCK_MISSING["evidence-reruns"] = "no arm has been re-run (bench/reruns.py)"


CROSSCHECK_MISSING = "run `python -m bench.crosscheck.training --collect DIR` (docs/crosscheck.md, \"Repeat it\")"
BLOCK_MISSING["crosscheck-means"] = CROSSCHECK_MISSING


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


@block("crosscheck-l2p-per-task", [])
def crosscheck_l2p_per_task(results: Results) -> List[str]:
    rows = crosscheck_training.load()
    return crosscheck_training.per_task_lines(rows, "l2p") if rows else []


BLOCK_MISSING["crosscheck-l2p-per-task"] = CROSSCHECK_MISSING
for _method in crosscheck_training.METHODS:
    BLOCK_MISSING[f"crosscheck-{_method}"] = CROSSCHECK_MISSING
    block(f"crosscheck-{_method}", [])(_crosscheck_per_seed(_method))


BLOCK_MISSING["smoke-figures"] = "run `python -m bench.smoke_figures`"
BLOCK_MISSING["cifar100-dinov2-cpu"] = "run `python -m bench.real_data_cpu --regime cifar100_first`"


@block("smoke-figures", [])
def smoke_figures_block(results: Results) -> List[str]:
    """README / getting started: the smoke run's end line and times, from bench/results/smoke.json."""
    return smoke_figures.smoke_lines(smoke_figures.load())


@block("cifar100-dinov2-cpu", [])
def cifar100_dinov2_cpu(results: Results) -> List[str]:
    """docs/results.md: no committed result of that config; the nearest regime's rows (cifar100_cpu.json)."""
    return smoke_figures.dinov2_cpu_lines(real_data_cpu.load_rows(smoke_figures.FIRST_REGIME.with_suffix("")))


def typographic(line: str) -> str:
    """ASCII minus before a digit -> "−" (table rules and names are left alone)."""
    return re.sub(r"-(?=\d)", "−", line)


def render_block(name: str, results: Results) -> str:
    lines = [typographic(ln) for ln in BLOCKS[name](results)]
    how = BLOCK_MISSING.get(name) or f"run `python -m bench.real_data_cpu --only {' '.join(BLOCK_ARMS[name])}`"
    missing = f"*No rows yet for `{name}`: {how}.*"
    return "\n".join(lines or [missing]) + "\n"


def render(text: str, rows: List[dict]) -> str:
    """``text`` with every marked block regenerated from ``rows``; unknown or mismatched markers raise."""
    unknown = sorted({m.group(1) for m in MARKER.finditer(text)} - set(BLOCKS))
    if unknown:
        raise ValueError(f"README marks unknown table(s) {unknown}; registered: {sorted(BLOCKS)}")
    opened, closed = re.findall(r"<!-- bench:([\w-]+) -->", text), re.findall(r"<!-- /bench:([\w-]+) -->", text)
    mismatched = [m.group(1) for m in MARKER.finditer(text) if m.group(1) != m.group(3)]
    if opened != closed or mismatched:
        raise ValueError(f"README table markers do not pair up (opened {opened}, closed {closed}): each "
                         "<!-- bench:NAME --> needs its own <!-- /bench:NAME --> after it")
    results = Results(rows)
    return MARKER.sub(lambda m: f"<!-- bench:{m.group(1)} -->\n{render_block(m.group(1), results)}"
                                f"<!-- /bench:{m.group(1)} -->", text)


def stale_blocks(text: str, rows: List[dict]) -> List[str]:
    """Names of the marked blocks whose text differs from what the rows give."""
    fresh = {m.group(1): m.group(2) for m in MARKER.finditer(render(text, rows))}
    return [m.group(1) for m in MARKER.finditer(text) if fresh[m.group(1)] != m.group(2)]


def pages() -> List[Path]:
    """The files whose marked tables are generated: README.md and every docs page."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=Path, nargs="+", default=None, help="Markdown files (default: README.md, docs/)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "evidence_cpu",
                   help="results path without suffix (its .json rows are read)")
    p.add_argument("--check", action="store_true", help="only check; exit 1 naming the stale tables")
    args = p.parse_args(argv)
    rows = real_data_cpu.load_rows(args.results)
    if not rows:
        sys.exit(f"error: no rows in {args.results.with_suffix('.json')}; run bench/real_data_cpu.py first")
    stale_files = []
    for path in args.files or pages():
        text = path.read_text()
        if args.check:
            stale = stale_blocks(text, rows)
            if stale:
                stale_files.append(path)
                print(f"{path}: tables {stale} differ from {args.results.with_suffix('.json')}; "
                      "run python -m bench.readme_tables", file=sys.stderr)
        elif MARKER.search(text):
            path.write_text(render(text, rows))
    return 1 if stale_files else 0


if __name__ == "__main__":
    sys.exit(main())
