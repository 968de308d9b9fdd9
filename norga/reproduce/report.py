"""The reproduction report: ours (mean ± std over seeds) | published | difference | within the published std.

    rows = aggregate(cells, Path("runs/repro"))
    write_report(rows, Path("runs/repro"), title="...")    # -> reproduce.md, reproduce.json

Only ``complete`` run folders count (``status`` complete, every task done); partial, failed and missing runs are
listed, never averaged. Values in % (FM in percentage points), taken from ``metrics.json``'s ``official`` block
when it has one (the authors' reporting: every class competes at evaluation; FA is the same either way), else
from its top level. Statistics: :func:`norga.reports.summary_stats.describe` (sample std, n - 1). A metric is *within*
when |ours − published| ≤ the published std (no decision where the paper prints no std); a quick-check cell with
an ``expected: [low, high]`` range is *within* when our mean lies in it. Cells of different protocols (task split,
class order, seeds: :mod:`norga.reproduce.manifest`) get one table each, headed by the protocol's label.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..outputs import check_output, edit_named_file, write_output
from ..reports.summary_stats import describe
from .manifest import METRICS, Cell
from .runner import folder_status, read_metrics


def run_values(metrics: dict) -> Dict[str, float]:
    """FA, CA, FM of one run in % (the ``official`` block when present)."""
    source = metrics.get("official") or metrics
    return {k: 100.0 * float(source[k]) for k in METRICS if isinstance(source.get(k), (int, float))}


def compare(metric: str, values: Sequence[float], cell: Cell) -> dict:
    """One metric of one cell: ours (n, mean, std), published/expected, difference, within."""
    ours = describe(values) if values else None
    row = {"metric": metric, "n": ours.n if ours else 0, "mean": ours.mean if ours else None,
           "std": None if ours is None or math.isnan(ours.std) else ours.std, "values": list(values)}
    if metric in cell.published:
        mean, std = cell.published[metric]
        row.update(published=mean, published_std=std)
        row["difference"] = None if ours is None else ours.mean - mean
        row["within"] = None if ours is None or std is None else abs(ours.mean - mean) <= std + 1e-9
    if metric in cell.expected:
        low, high = cell.expected[metric]
        row.update(expected=[low, high])
        row["within"] = None if ours is None else low <= ours.mean <= high
    return row


def aggregate(cells: Sequence[Cell], out: Path, seeds: Optional[int] = None) -> List[dict]:
    """One row per cell: its runs' statuses and the comparison of every published (or expected) metric
    (over the first ``seeds`` seeds of each cell when given, as ``--seeds``)."""
    rows = []
    for cell in cells:
        runs = {seed: Path(out) / cell.id / f"seed{seed}" for seed in cell.seeds[:seeds]}
        status = {seed: folder_status(folder) for seed, folder in runs.items()} if cell.runnable else {}
        values = {seed: run_values(read_metrics(runs[seed]) or {}) for seed, s in status.items() if s == "complete"}
        metrics = [m for m in METRICS if m in cell.published or m in cell.expected]
        figure = next((runs[s] / "plots" / "acc_matrix.png" for s in values
                       if (runs[s] / "plots" / "acc_matrix.png").is_file()), None)
        rows.append({"cell": cell.id, "table": cell.table, "benchmark": cell.benchmark, "backbone": cell.backbone,
                     "method": cell.method, "protocol": cell.protocol, "protocol_label": cell.protocol_label,
                     "source": cell.source, "runnable": cell.runnable,
                     "missing": cell.missing, "seeds": list(cell.seeds), "complete_seeds": sorted(values),
                     "status": {str(k): v for k, v in status.items()},
                     "figure": str(figure) if figure else None,
                     "metrics": [compare(m, [values[s][m] for s in sorted(values) if m in values[s]], cell)
                                 for m in metrics]})
    return rows


def _num(value: Optional[float], std: Optional[float] = None, sign: bool = False) -> str:
    if value is None:
        return "–"
    text = f"{value:+.2f}" if sign else f"{value:.2f}"
    return text + (f" ± {std:.2f}" if std is not None else "")


def _within(value: Optional[bool]) -> str:
    return {True: "yes", False: "**no**", None: "–"}[value]


def by_protocol(rows: Sequence[dict]) -> List[tuple]:
    """[(protocol label, its rows)] in first-appearance order; one group labelled "" when all rows share one."""
    groups: Dict[str, List[dict]] = {}
    for row in rows:
        groups.setdefault(row.get("protocol") or "", []).append(row)
    if len(groups) <= 1:
        return [("", list(rows))]
    return [(f"Protocol `{name}`: {group[0].get('protocol_label') or name}", group) for name, group in groups.items()]


def _report_table(rows: Sequence[dict]) -> List[str]:
    lines = ["| cell | metric | n | ours | published (expected) | difference | within | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        runs = ", ".join(f"{s}: {v}" for s, v in row["status"].items()) or f"not runnable: {row['missing']}"
        for m in row["metrics"]:
            ref = (_num(m.get("published"), m.get("published_std")) if "published" in m
                   else "[{:.2f}, {:.2f}]".format(*m["expected"]))
            lines.append(f"| {row['cell']} | {m['metric']} | {m['n']} | {_num(m['mean'], m['std'])} | {ref} | "
                         f"{_num(m.get('difference'), sign=True)} | {_within(m.get('within'))} | {runs} |")
    return lines


def markdown(rows: Sequence[dict], title: str, out: Path) -> str:
    """The report as Markdown: one table line per cell and metric (a table per protocol), figures linked relative
    to ``out``."""
    lines = [f"# {title}", "",
             "Ours: mean ± sample std over the complete seeds (n), in % (FM in points), from each run's "
             "`metrics.json` (`official` block: the authors' reporting). Difference = ours − published; "
             "within = |difference| ≤ published std (quick check: ours inside the expected range).", ""]
    for label, group in by_protocol(rows):
        lines += ([f"## {label}", ""] if label else []) + _report_table(group) + ([""] if label else [])
    figures = [r for r in rows if r["figure"]]
    if figures:
        lines += ["", "## Accuracy matrices (first complete seed of each cell)", ""]
        lines += [f"![{r['cell']}]({Path(os.path.relpath(r['figure'], out)).as_posix()}) " for r in figures]
    return "\n".join(lines) + "\n"


def write_report(rows: Sequence[dict], out: Path, title: str, extra: Optional[dict] = None,
                 appendix: str = "") -> List[Path]:
    """Write ``OUT/reproduce.md`` (the table, then ``appendix``) and ``OUT/reproduce.json`` (rows + ``extra``)
    through the write guard; returns the two paths."""
    out = Path(out)
    md, js = out / "reproduce.md", out / "reproduce.json"
    for path in (md, js):  # both checked before either is written
        check_output(path, "--out")
    write_output(md, (markdown(rows, title, out) + appendix).encode(), "--out")
    write_output(js, (json.dumps({"title": title, "cells": list(rows), **(extra or {})}, indent=1) + "\n").encode(),
                 "--out")
    return [md, js]


README_MARK = "reproduce:gpu"  # README.md's "reproduced on GPU" table sits between <!-- reproduce:gpu --> markers


def summary_lines(rows: Sequence[dict]) -> List[str]:
    """The compact table of the README: one line per cell with complete runs, FA/CA/FM ours vs published (a table
    per protocol, each after a line naming it, when the rows hold several)."""
    lines: List[str] = []
    for label, group in by_protocol(rows):
        lines += ([f"{label}:", ""] if label else []) + [
            "| cell | seeds | metric | ours | published | difference | within std |", "|---|---|---|---|---|---|---|"]
        for row in group:
            for m in row["metrics"]:
                if m["n"] and "published" in m:
                    lines.append(f"| {row['cell']} | {m['n']} | {m['metric']} | {_num(m['mean'], m['std'])} | "
                                 f"{_num(m['published'], m.get('published_std'))} | "
                                 f"{_num(m['difference'], sign=True)} | {_within(m['within'])} |")
        lines += [""] if label else []
    return lines


def fill_readme(path: Path, rows: Sequence[dict]) -> int:
    """Replace the lines between ``<!-- reproduce:gpu -->`` and its closing marker in ``path`` with
    :func:`summary_lines`; returns the number of cell lines written. Raises ValueError without the markers."""
    path = Path(path)
    text = path.read_text()
    start, end = f"<!-- {README_MARK} -->\n", f"<!-- /{README_MARK} -->"
    if start not in text or end not in text:
        raise ValueError(f"{path} has no {start.strip()} ... {end} block to fill")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    lines = summary_lines(rows)
    edit_named_file(path, (head + start + "\n".join(lines) + "\n" + end + tail).encode(), "--readme")
    return sum(line.startswith("| ") and not line.startswith("| cell |") for line in lines)
