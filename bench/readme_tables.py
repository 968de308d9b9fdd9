"""The benchmark tables of the README and the docs pages, generated from the committed rows.

    python -m bench.readme_tables            # rewrite every marked table of README.md and docs/**/*.md
    python -m bench.readme_tables --check    # exit 1, naming the stale tables, if a file differs

A generated table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` (bench/table_blocks.py holds
the registry and the renderer). This module registers the tables of the evidence rows
(``bench/results/evidence_cpu.json``; numbers as in ``bench/results/evidence_cpu.md`` with typographic minus
signs); bench/source_tables.py registers those that read other result files (cross-check, smoke run, the quick
GPU check's manifest). A ``<!-- bench:file:PATH -->`` block shows a committed generated file, e.g. a study's
report (its own generator checks it against its rows). ``tests/test_readme.py`` runs the check, so no page can
fall behind the committed rows.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, List

from bench import real_data_cpu, source_tables  # noqa: F401  (source_tables registers its blocks)
from bench.group_tables import arm_table, has_intervals, pair_table, register_group, verdicts
from bench.moe_arms import routing_lines, routing_pair_lines
from bench.regimes import REPO
from bench.row_merge import load_rows, rows_path
from bench.table_blocks import MARKER, Results, block, render, stale_blocks
from norga.reports.summary_stats import table_head


MATCHED = ["lora_moe", "mh_moe", "lora_moe_k16_top5"]
H_SWEEP = ["mh_moe_h2", "mh_moe_h4", "mh_moe", "mh_moe_h8"]  # H = 2, 4, 6 (the backbone's heads), 8
HEADWISE = ["norga_headwise", "norga_tanh", "hideprompt"]
OVERVIEW = ["norga_tanh", "hideprompt", "no_prompt", "simplecil", "ranpac", "aper", "ease", "inflora", "sd_lora",
            "slca", "mos", "tuna", "hidelora", "sprompt", "dualprompt", "l2p", "coda", "lora_moe", "mh_moe"]


def _table(lines: List[str]) -> List[str]:
    return [ln for ln in lines if ln.startswith("|")]


@block("evidence-overview", OVERVIEW)
def evidence_overview(results: Results) -> List[str]:
    return arm_table(results, OVERVIEW)


READING = [a for a in OVERVIEW if a not in ("no_prompt", "simplecil")]  # every overview arm paired with no_prompt


@block("evidence-reading", ["no_prompt", *READING])
def evidence_reading(results: Results) -> List[str]:
    """README: every overview arm against ``no_prompt`` in one sentence (above / level / below, FA and TIL FA)."""
    ready = [a for a in READING if has_intervals(results, [f"{a} − no_prompt"])]
    if not ready:
        return []
    fa, til = (verdicts(results, metric, ready, "no_prompt") for metric in ("FA", "TIL_FA"))
    left_out = ", ".join(f"`{a}`" for a in READING if a not in ready)
    return [f"Reading: against `no_prompt` (the same pipeline without prompts), paired over the seeds (*level*: the "
            f"95% interval includes 0), the arms are in FA "
            f"{fa}; given the task (TIL FA) {til}." + (f" Not yet compared (fewer than 2 seeds): {left_out}."
                                                      if left_out else "")]


MAIN_PAIRS = ["norga_tanh − hideprompt", "hideprompt − no_prompt", "norga_tanh − no_prompt"]


@block("evidence-main-pairs", ["hideprompt", "norga_tanh", "no_prompt"])
def evidence_main_pairs(results: Results) -> List[str]:
    """docs/results.md: the gate and the prompts, paired (every STAT_COLUMNS metric)."""
    return pair_table(results, MAIN_PAIRS, real_data_cpu.STAT_COLUMNS)


@block("evidence-diagnostics", ["hideprompt", "norga_tanh"])
def evidence_diagnostics(results: Results) -> List[str]:
    """docs/results.md: the prompted arms' task-mean diagnostics (probe gain, feature change), over seeds."""
    return _table(real_data_cpu.diagnostics_lines(results.rows, real_data_cpu.REGIMES["evidence"]))


@block("moe-arms", MATCHED)
def moe_arms(results: Results) -> List[str]:
    return _table(routing_lines(results.rows, MATCHED))


@block("moe-pairs", MATCHED)
def moe_pairs(results: Results) -> List[str]:
    return _table(routing_pair_lines(results.rows, [("mh_moe", "lora_moe"), ("mh_moe", "lora_moe_k16_top5")]))


@block("moe-vs-frozen", ["lora_moe", "mh_moe", "no_prompt"])
def moe_vs_frozen(results: Results) -> List[str]:
    return pair_table(results, [n for n in results.stats["pairs"] if n.endswith(" − no_prompt") and "moe" in n])


@block("h-sweep", H_SWEEP)
def h_sweep(results: Results) -> List[str]:
    return _table(routing_lines(results.rows, H_SWEEP))


@block("h-sweep-pair", ["mh_moe_h8", "mh_moe_h2"])
def h_sweep_pair(results: Results) -> List[str]:
    return _table(routing_pair_lines(results.rows, [("mh_moe_h8", "mh_moe_h2")]))


@block("headwise-arms", HEADWISE)
def headwise_arms(results: Results) -> List[str]:
    return arm_table(results, HEADWISE) if "norga_headwise" in results.stats["arms"] else []


@block("headwise-pairs", HEADWISE)
def headwise_pairs(results: Results) -> List[str]:
    names = [n for n in results.stats["pairs"] if n.startswith("norga_headwise − ")]
    return pair_table(results, names, real_data_cpu.STAT_COLUMNS)


PROMPT_BASELINES = ["sprompt", "l2p", "dualprompt", "coda"]
NEWER_BASELINES = ["ranpac", "aper", "ease", "inflora", "sd_lora"]  # issue #35's arms
NEWEST_METHODS = ["slca", "mos", "tuna", "hidelora"]  # issue #57's arms
SIMPLECIL_PAIRS = ["sprompt", "dualprompt", "l2p", "coda", "ranpac", "aper", "ease", "inflora", "sd_lora", "no_prompt"]


@block("baselines-vs-simplecil", SIMPLECIL_PAIRS + ["simplecil"])
def baselines_vs_simplecil(results: Results) -> List[str]:
    """Paired differences arm − simplecil (the prompt-free row of the published tables)."""
    return pair_table(results, [f"{a} − simplecil" for a in SIMPLECIL_PAIRS])


@block("baselines-simplecil-verdict", PROMPT_BASELINES + ["simplecil"])
def baselines_simplecil_verdict(results: Results) -> List[str]:
    """README: the prompt baselines against SimpleCIL in one sentence (level = the interval includes 0)."""
    if not has_intervals(results, [f"{a} − simplecil" for a in PROMPT_BASELINES]):
        return []
    fa, til = (verdicts(results, metric, PROMPT_BASELINES, "simplecil") for metric in ("FA", "TIL_FA"))
    return [f"Against SimpleCIL, the published tables' prompt-free row, the prompt baselines are in FA {fa}; "
            f"given the task (TIL FA) {til} (paired over the seeds, *level*: the 95% interval includes 0):"]


BASELINE_TABLE = ["no_prompt", "norga_tanh", *PROMPT_BASELINES]  # the arms of docs/results.md's baseline tables


@block("baselines-arms", BASELINE_TABLE)
def baselines_arms(results: Results) -> List[str]:
    """docs/results.md: the prompt baselines beside no_prompt and norga_tanh."""
    return arm_table(results, BASELINE_TABLE)


@block("baselines-pairs", BASELINE_TABLE)
def baselines_pairs(results: Results) -> List[str]:
    """docs/results.md: each prompt baseline − no_prompt, then norga_tanh − each prompt baseline."""
    return pair_table(results, [*(f"{a} − no_prompt" for a in PROMPT_BASELINES),
                                 *(f"norga_tanh − {a}" for a in PROMPT_BASELINES)])


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


register_group("newer-baselines", "the newer baselines", NEWER_BASELINES, ("no_prompt", "norga_tanh"))
register_group("newest-methods", "the newest methods", NEWEST_METHODS, ("no_prompt", "norga_tanh", "simplecil"))

for _arm in NEWER_BASELINES + NEWEST_METHODS:
    block(f"{_arm}-evidence", [_arm])(method_evidence(_arm))


def pages() -> List[Path]:
    """The files whose marked tables are generated: README.md, every docs page and every cross-check folder's README
    (crosscheck/<folder>/README.md, read as text; its docs copy is docs/crosscheck/<folder>.md)."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted((REPO / "crosscheck").glob("*/README.md"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=Path, nargs="+", default=None, help="Markdown files (default: README.md, docs/)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results" / "evidence_cpu",
                   help="results path without suffix (its .json rows are read)")
    p.add_argument("--check", action="store_true", help="only check; exit 1 naming the stale tables")
    args = p.parse_args(argv)
    rows = load_rows(args.results)
    if not rows:
        sys.exit(f"error: no rows in {rows_path(args.results)}; run bench/real_data_cpu.py first")
    stale_files = []
    for path in args.files or pages():
        text = path.read_text()
        if args.check:
            stale = stale_blocks(text, rows)
            if stale:
                stale_files.append(path)
                print(f"{path}: tables {stale} differ from {rows_path(args.results)}; "
                      "run python -m bench.readme_tables", file=sys.stderr)
        elif MARKER.search(text):
            path.write_text(render(text, rows))
    return 1 if stale_files else 0


if __name__ == "__main__":
    sys.exit(main())
