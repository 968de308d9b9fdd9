"""Rows, statistics, the derived expected ranges and the report of ``studies/schedule_cut/run.py`` (its docstring holds
the pre-registered rule). Values in % (FM in percentage points); differences in points.

``ctx`` (built by ``studies.schedule_cut.run.context``): ``cells`` (method -> quick-check Cell), ``current``
((method, schedule) -> the settings a row must have to count), ``manifest`` (its path), ``quick``, ``seeds``;
optionally ``paper`` (the published manifest, default ``configs/reproduce/paper.yaml``).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from bench.row_merge import result_file, save_rows
from norga.files import atomic_write_bytes
from norga.reproduce.manifest import DEFAULT_MANIFEST, METRICS, Cell, load_manifest
from norga.reports.summary_stats import BOUNDS, Estimate, describe, difference_text, paired, table_head

REPO = Path(__file__).resolve().parents[2]
SCHEDULES = ("full", "cut")
MIN_SEEDS = 3  # paired seeds per method before --write-expected writes anything
STD_FACTOR = 2.0  # the range is widened by this many published stds on each side


class ReportError(Exception):
    """Rows or a manifest the report cannot use (the message names the fix)."""


# ---- rows ----------------------------------------------------------------------------------------------
def current_rows(rows: Sequence[dict], ctx: dict) -> List[dict]:
    """The rows whose settings are the current ones (a changed manifest or analogue leaves the others out)."""
    return [r for r in rows if ctx["current"].get((r["method"], r["schedule"])) == r.get("settings")]


def by_seed(rows: Sequence[dict], method: str, schedule: str, metric: str) -> Dict[int, float]:
    return {r["seed"]: r[metric] for r in rows if (r["method"], r["schedule"]) == (method, schedule) and metric in r}


def differences(rows: Sequence[dict], method: str) -> Dict[str, Tuple[List[int], Estimate]]:
    """Per metric: (paired seeds, estimate of cut − full in points); empty when no seed has both schedules."""
    out = {}
    for metric in METRICS:
        cut, full = by_seed(rows, method, "cut", metric), by_seed(rows, method, "full", metric)
        if set(cut) & set(full):
            out[metric] = paired(cut, full)
    return out


# ---- the pre-registered rule -------------------------------------------------------------------------------
def published_values(cell: Cell, paper: Path) -> Dict[str, Tuple[float, Optional[float]]]:
    """Published full-schedule (mean, std) per metric of ``cell``: the paper manifest's cell of the same table,
    benchmark, backbone and method."""
    key = (cell.table, cell.benchmark, cell.backbone, cell.method)
    matches = [c for c in load_manifest(paper).cells if (c.table, c.benchmark, c.backbone, c.method) == key]
    if len(matches) != 1 or not matches[0].published:
        raise ReportError(f"{paper}: expected one cell with published numbers for table {key[0]}, {key[1]}, "
                          f"{key[2]}, {key[3]} (the quick cell {cell.id}), found {len(matches)}; fix the manifests")
    return matches[0].published


def expected_range(metric: str, published: Tuple[float, Optional[float]], diff: Estimate) -> Tuple[float, float]:
    """``[P + L − 2·S, P + H + 2·S]`` clipped to ``BOUNDS[metric]`` and rounded outward to 0.1 (a null S is 0)."""
    mean, std = published[0], published[1] or 0.0
    low, high = mean + diff.low - STD_FACTOR * std, mean + diff.high + STD_FACTOR * std
    lo_bound, hi_bound = BOUNDS[metric]
    low, high = (min(max(v, lo_bound), hi_bound) for v in (low, high))
    return math.floor(round(low * 10, 6)) / 10, math.ceil(round(high * 10, 6)) / 10


def derived_ranges(rows: Sequence[dict], ctx: dict) -> Dict[str, Dict[str, Tuple[float, float]]]:
    """Method -> metric -> the derived range, for methods with at least two paired seeds (an interval)."""
    paper = ctx.get("paper") or REPO / DEFAULT_MANIFEST
    out = {}
    for method, cell in ctx["cells"].items():
        diffs, published = differences(rows, method), published_values(cell, paper)
        ranges = {m: expected_range(m, published[m], e) for m, (_, e) in diffs.items()
                  if m in published and e.n >= 2}
        if ranges:
            out[method] = ranges
    return out


def missing_rows(rows: Sequence[dict], ctx: dict) -> List[str]:
    """What keeps each method below MIN_SEEDS paired seeds: its unfinished (schedule, seed) among ``ctx["seeds"]``,
    and how many seeds are short when those seeds are too few."""
    missing = []
    for method in ctx["cells"]:
        paired_seeds = set(by_seed(rows, method, "cut", "FA")) & set(by_seed(rows, method, "full", "FA"))
        if len(paired_seeds) >= MIN_SEEDS:
            continue
        done = {(r["schedule"], r["seed"]) for r in rows if r["method"] == method}
        missing += [f"{method} {s} seed {seed}" for seed in ctx["seeds"] for s in SCHEDULES if (s, seed) not in done]
        short = MIN_SEEDS - len(paired_seeds | set(ctx["seeds"]))
        if short > 0:
            missing.append(f"{method} full and cut of {short} more seed(s) than --seeds names")
    return missing


# ---- writing the manifest ---------------------------------------------------------------------------------
def write_expected(rows: Sequence[dict], ctx: dict) -> Dict[str, Dict[str, Tuple[float, float]]]:
    """Write every method's derived ranges into the manifest's ``expected:`` lines; refuses (ReportError naming
    the missing rows) unless every method has MIN_SEEDS paired seeds of the current settings."""
    if ctx["quick"]:
        raise ReportError("--write-expected takes the analogue's rows; --quick rows only check the mechanism")
    rows = current_rows(rows, ctx)
    missing = missing_rows(rows, ctx)
    if missing:
        raise ReportError(f"--write-expected needs {MIN_SEEDS} seeds with both schedules finished per method; "
                          f"missing rows: {', '.join(missing)}; run python -m studies.schedule_cut.run first (it "
                          "resumes; --seeds S ... for other seeds)")
    ranges = derived_ranges(rows, ctx)
    path = Path(ctx["manifest"])
    text = path.read_text()
    for method, cell in ctx["cells"].items():
        seeds = sorted(set(by_seed(rows, method, "cut", "FA")) & set(by_seed(rows, method, "full", "FA")))
        text = replace_expected(text, cell.id, ranges[method], seeds)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    try:
        written = {c.id: c.expected for c in load_manifest(tmp).cells}
    finally:
        tmp.unlink()
    if any(written[c.id] != ranges[m] for m, c in ctx["cells"].items()):
        raise ReportError(f"{path}: the edited manifest does not read back the derived ranges; nothing was written")
    atomic_write_bytes(path, text.encode())
    return ranges


def replace_expected(text: str, cell_id: str, ranges: Dict[str, Tuple[float, float]], seeds: Sequence[int]) -> str:
    """``text`` with the ``expected:`` line of the block-style cell ``- id: cell_id`` replaced by ``ranges``."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(rf"\s*-\s+id:\s*{re.escape(cell_id)}\s*$", line)), None)
    if start is None:
        raise ReportError(f"no line '- id: {cell_id}' in the manifest; write the cell in block style")
    for i in range(start + 1, len(lines)):
        if re.match(r"\s*-\s+id:", lines[i]):
            break
        found = re.match(r"(\s*)expected:", lines[i])
        if found:
            body = ", ".join(f"{m}: [{low:.1f}, {high:.1f}]" for m, (low, high) in ranges.items())
            lines[i] = (f"{found.group(1)}expected: {{{body}}}  # python -m studies.schedule_cut.run --write-expected, "
                        f"seeds {', '.join(map(str, seeds))} (studies/schedule_cut/schedule_cut.md)\n")
            return "".join(lines)
    raise ReportError(f"cell {cell_id} has no one-line 'expected: {{...}}' to replace; add one, e.g. "
                      "expected: {FA: [0, 100]}")


# ---- the report -------------------------------------------------------------------------------------------
def _fmt(e: Estimate) -> str:
    return f"{e.mean:.2f}" if e.n < 2 else f"{e.mean:.2f} ± {e.std:.2f}"


def markdown(all_rows: Sequence[dict], ctx: dict) -> str:
    rows = current_rows(all_rows, ctx)
    title = "# The quick GPU check's schedule cut on a CPU analogue (issue #34)"
    lines = [title + (" — QUICK" if ctx["quick"] else ""),
             "", "Generated by `python -m studies.schedule_cut.run --report`; protocol and the pre-registered rule: "
             f"the module docstring. Torch threads per run: {sorted({r.get('threads') for r in rows}, key=str)}; "
             "FA, CA in %, FM and differences in points.", "",
             "| method | schedule | seed | FA | CA | FM | minutes |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["method"], r["seed"], r["schedule"])):
        lines.append(f"| {r['method']} | {r['schedule']} | {r['seed']} | " + " | ".join(f"{r[m]:.2f}" for m in METRICS)
                     + f" | {r['minutes']:.1f} |")
    stale = len(all_rows) - len(rows)
    if stale:
        lines += ["", f"{stale} row(s) of other settings (an older manifest or analogue) are kept in the .json, "
                  "not counted."]
    lines += ["", "Per schedule, mean ± sample std over seeds:", "", *table_head("method / schedule", METRICS)]
    for method in ctx["cells"]:
        for schedule in SCHEDULES:
            values = {m: list(by_seed(rows, method, schedule, m).values()) for m in METRICS}
            if values["FA"]:
                lines.append(f"| {method} {schedule} | {len(values['FA'])} | "
                             + " | ".join(_fmt(describe(values[m])) for m in METRICS) + " |")
    lines += ["", "Cut − full, paired by seed (mean [95% t interval]):", "", *table_head("method", METRICS)]
    for method in ctx["cells"]:
        diffs = differences(rows, method)
        if diffs:
            lines.append(f"| {method} | {len(diffs['FA'][0])} | "
                         + " | ".join(difference_text(diffs[m][1]) for m in METRICS) + " |")
    return "\n".join(lines + ["", *range_lines(rows, ctx), ""])


def range_lines(rows: Sequence[dict], ctx: dict) -> List[str]:
    """The derived ranges beside the manifest's current ones, and whether --write-expected would write them."""
    paper = ctx.get("paper") or REPO / DEFAULT_MANIFEST
    ranges = derived_ranges(rows, ctx)
    lines = [f"Expected range of the quick GPU cell, [P + L − {STD_FACTOR:g}·S, P + H + {STD_FACTOR:g}·S] (P ± S "
             "published, [L, H] the interval above):", "",
             "| method | metric | published | derived range | manifest now |", "|---|---|---|---|---|"]
    for method, cell in ctx["cells"].items():
        published = published_values(cell, paper)
        for m in METRICS:
            mean, std = published.get(m, (None, None))
            derived = ranges.get(method, {}).get(m)
            now = cell.expected.get(m)
            lines.append(f"| {method} | {m} | " + ("–" if mean is None else f"{mean:.2f} ± {std or 0:.2f}")
                         + f" | {'–' if derived is None else f'{derived[0]:.1f} – {derived[1]:.1f}'}"
                         + f" | {'–' if now is None else f'{now[0]:.1f} – {now[1]:.1f}'} |")
    missing = missing_rows(rows, ctx)
    if ctx["quick"]:
        lines += ["", "QUICK rows check the mechanism only: these ranges are not for the GPU cell."]
    elif missing:
        lines += ["", f"Not yet written (needs {MIN_SEEDS} paired seeds per method); missing: {', '.join(missing)}."]
    elif all(tuple(cell.expected.get(m, ())) == tuple(ranges[method][m]) for method, cell in ctx["cells"].items()
             for m in METRICS):
        manifest = Path(ctx["manifest"])
        shown = manifest.relative_to(REPO) if manifest.is_relative_to(REPO) else manifest
        lines += ["", f"The manifest ({shown}) holds the derived ranges."]
    else:
        lines += ["", "Ready: `python -m studies.schedule_cut.run --write-expected` writes the derived ranges."]
    return lines


def save(rows: Sequence[dict], stem: Path, ctx: dict) -> None:
    """Write ``<stem>.json`` (every row) and ``<stem>.md`` (the report) atomically."""
    save_rows(stem, rows)
    atomic_write_bytes(result_file(stem, ".md"), markdown(rows, ctx).encode())
