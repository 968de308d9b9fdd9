"""Aggregate run folders over seeds: mean ± std and 95% intervals, paired differences, a figure.

    norga summarize runs/c100_norga_s42 runs/c100_norga_s43 runs/c100_norga_s44 \\
        [--vs runs/c100_hide_s42 runs/c100_hide_s43 runs/c100_hide_s44] [--out DIR]

Each argument is a run folder written by ``train.py`` (``config.yaml`` + ``metrics.json``).
A run whose ``metrics.json`` is missing or has fewer completed tasks than tasks
is listed as incomplete and **excluded**, never averaged. The runs of a group
must have the same config except the seed (and the ``logging`` section);
otherwise the command stops and names every differing key with its values
(``--ignore KEY`` accepts a difference). Two runs with one seed in a group are
refused. Metrics, in % (percentage points for FM, BWT and differences): FA, CA,
FM, BWT (class-incremental), TIL FA (true task id given), TII accuracy (mean
over tasks of the final task-identity accuracy). Per group: mean, sample std
(n − 1) and the 95% Student-t interval of the mean. With ``--vs``: group − vs
differences paired by seed over the seeds both groups have.

Prints Markdown; with ``--out DIR`` also writes ``summary.md``, ``summary.csv``
(columns ``kind,group,run,metric,n,mean_pct,std_pct,ci95_low_pct,ci95_high_pct,seeds,ci95_clipped``;
kind = run / group / paired) and ``comparison.png``. An interval reaching past what its metric can take
(accuracies [0, 100] %, FM, BWT and differences [−100, 100] points; the t interval can, with few seeds) is
shown clipped to it, marked † with the unclipped interval in a note (``ci95_clipped`` = 1 in the CSV).
Exit status 0, or 2 with a message on stderr for unusable input.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..outputs import OUTPUT_FOLDER
from ..reports.summary_stats import BOUNDS, CLIPPED, DIFFERENCE_BOUNDS, Estimate, clip_note, paired, shown_interval

from ..engine.summary_runs import (IGNORED_KEYS, METRICS, PAPER_METRICS, Group, Run, SummaryError,  # noqa: F401
                           check_comparable, differing_keys, flatten, group_name, load_group, load_run)


def _num(x: float) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.2f}"


def _interval(e: Estimate) -> str:
    return "–" if math.isnan(e.low) else f"[{e.low:.2f}, {e.high:.2f}]"


def paper_line(group: Group) -> str:
    """'name (3 seeds: 42, 43, 44): FA 48.15 ± 0.40, CA 56.01 ± 0.50, FM 12.28 ± 0.30' (mean ± std, %)."""
    est = group.estimates()
    parts = [f"{k} {est[k].mean:.2f}" + (f" ± {est[k].std:.2f}" if est[k].n > 1 else "") for k in PAPER_METRICS]
    seeds = ", ".join(str(s) for s in group.seeds)
    plural = "seed" if len(group.runs) == 1 else "seeds"
    return f"{group.name} ({len(group.runs)} {plural}: {seeds}): " + ", ".join(parts)


def runs_table(groups: Sequence[Group]) -> List[str]:
    lines = ["| group | run | seed | " + " | ".join(METRICS) + " |", "|---" * (3 + len(METRICS)) + "|"]
    for g in groups:
        for r in g.runs:
            v = r.values()
            lines.append(f"| {g.name} | {r.path.name} | {r.seed} | " + " | ".join(_num(v[k]) for k in METRICS) + " |")
    return lines


def estimate_table(estimates: Dict[str, Estimate], mean_label: str = "mean", difference: bool = False) -> List[str]:
    """Markdown rows per metric; an interval clipped to the metric's range is marked † and explained below."""
    lines = [f"| metric | n | {mean_label} | std | 95% CI |", "|---|---|---|---|---|"]
    clipped = {}
    for k in METRICS:
        e, was_clipped = shown_interval(estimates[k], k, difference)
        if was_clipped:
            clipped[k] = (estimates[k], e)
        mark = f" {CLIPPED}" if was_clipped else ""
        lines.append(f"| {k} | {e.n} | {_num(e.mean)} | {_num(e.std)} | {_interval(e)}{mark} |")
    return lines + (["", clip_note(clipped, difference)] if clipped else [])


def paired_estimates(a: Group, b: Group) -> Tuple[List[int], Dict[str, Estimate]]:
    """Group a − group b per metric over common seeds (percentage points)."""
    out, seeds = {}, []
    for k in METRICS:
        seeds, out[k] = paired(a.by_seed(k), b.by_seed(k))
    return seeds, out


def markdown(groups: Sequence[Group], pair: Optional[Tuple[List[int], Dict[str, Estimate]]],
             between: Dict[str, list]) -> str:
    lines = ["# norga summary", "",
             "Accuracies in %, averages over tasks (FM, BWT and differences in percentage points); "
             "std = sample standard deviation (n − 1); 95% CI = Student-t interval of the mean.", ""]
    lines += runs_table(groups) + [""]
    for g in groups:
        lines += [f"## {g.name}", "", *estimate_table(g.estimates()), "", paper_line(g), ""]
    if pair is not None:
        seeds, est = pair
        a, b = groups
        lines += [f"## {a.name} − {b.name}, paired by seed", "",
                  f"Over the {len(seeds)} common seed(s) {', '.join(map(str, seeds))}; "
                  "positive = the first group is higher.", ""]
        if between:
            lines += ["Configs differ in: " + ", ".join(f"{k} ({vals[0]!r} vs {vals[-1]!r})"
                                                         for k, vals in between.items()), ""]
        lines += estimate_table(est, "mean diff", difference=True) + [""]
    excluded = [(g.name, p, why) for g in groups for p, why in g.excluded]
    if excluded:
        lines += ["## Excluded runs", ""] + [f"- {p} ({name}): {why}" for name, p, why in excluded] + [""]
    return "\n".join(lines)


CSV_COLUMNS = ["kind", "group", "run", "metric", "n", "mean_pct", "std_pct", "ci95_low_pct", "ci95_high_pct", "seeds",
               "ci95_clipped"]
SUMMARY_FILES = ("summary.md", "summary.csv", "comparison.png")


def out_problem(out: Path) -> Optional[str]:
    """Why ``--out`` must not be written, or None. The write guard (:mod:`norga.outputs`) decides for every file
    before any is written: a file, a folder inside a run folder or an export, or summary files there that norga
    did not write or that were edited since are refused: norga never replaces a file the user wrote."""
    from ..outputs import OutputRefused, check_output

    if out.exists() and not out.is_dir():
        return f"--out {out} exists and is not a folder; choose another --out"
    try:
        for name in SUMMARY_FILES:
            check_output(out / name, "--out")
    except OutputRefused as err:
        return str(err)
    return None


def csv_text(groups: Sequence[Group], pair: Optional[Tuple[List[int], Dict[str, Estimate]]]) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(CSV_COLUMNS)
    fmt = lambda x: "" if math.isnan(x) else f"{x:.6f}"
    for g in groups:
        for r in g.runs:
            for k, v in r.values().items():
                w.writerow(["run", g.name, str(r.path), k, 1, fmt(v), "", "", "", r.seed, ""])
        for k, raw in g.estimates().items():
            e, clipped = shown_interval(raw, k)
            w.writerow(["group", g.name, "", k, e.n, fmt(e.mean), fmt(e.std), fmt(e.low), fmt(e.high),
                        " ".join(map(str, g.seeds)), int(clipped)])
    if pair is not None:
        seeds, est = pair
        name = f"{groups[0].name} - {groups[1].name}"
        for k, raw in est.items():
            e, clipped = shown_interval(raw, k, difference=True)
            w.writerow(["paired", name, "", k, e.n, fmt(e.mean), fmt(e.std), fmt(e.low), fmt(e.high),
                        " ".join(map(str, seeds)), int(clipped)])
    return out.getvalue()


# ---- command line ----------------------------------------------------------------------------

def build(args) -> Tuple[List[Group], Optional[tuple], Dict[str, list]]:
    ignore = IGNORED_KEYS + tuple(args.ignore)
    if len(args.runs) == 1 and not args.vs and (args.runs[0] / "sweep.json").is_file():  # a sweep root: per point
        return sweep_groups(args.runs[0], ignore, args.allow_mixed), None, {}
    groups = [load_group(args.runs, args.name, "A", ignore, allow_mixed=args.allow_mixed)]
    pair, between = None, {}
    if args.vs:
        same = sorted({str(p) for p in args.vs if p.resolve() in {r.resolve() for r in args.runs}})
        if same:
            raise SummaryError(f"--vs names run folders of the first group too ({', '.join(same)}): a run compared "
                               "with itself differs by zero; give the other configuration's runs after --vs")
        groups.append(load_group(args.vs, args.vs_name, "B", ignore, allow_mixed=args.allow_mixed))
        if groups[1].name == groups[0].name:
            groups[0].name, groups[1].name = groups[0].name + " (A)", groups[1].name + " (B)"
        try:
            pair = paired_estimates(groups[0], groups[1])
        except ValueError as err:
            raise SummaryError(f"{err}: '{groups[0].name}' has seeds {groups[0].seeds}, "
                               f"'{groups[1].name}' has {groups[1].seeds}") from err
        between = differing_keys([groups[0].runs[0].config, groups[1].runs[0].config], ignore)
    return groups, pair, between


def sweep_groups(root: Path, ignore: Sequence[str], allow_mixed: bool) -> List[Group]:
    """One group per point of the sweep root ``root`` (``norga sweep``), over its seeds; a point without a complete
    run is left out with a warning line."""
    from ..sweep.root import point_folders

    groups = []
    for name, folders in point_folders(root):
        try:
            groups.append(load_group(folders, name, name, ignore, allow_mixed=allow_mixed))
        except SummaryError as err:
            print(f"warning: point {name} left out: {err}", file=sys.stderr)
    if not groups:
        raise SummaryError(f"the sweep root {root} has no point with a complete run yet (norga sweep status {root})")
    return groups


def write_outputs(out: Path, groups: Sequence[Group], pair, text: str) -> List[Path]:
    from ..outputs import write_output
    from ..reports.plots import comparison_figure

    write_output(out / "summary.md", (text + "\n").encode("utf-8"), "--out")
    write_output(out / "summary.csv", csv_text(groups, pair).encode("utf-8"), "--out")
    comparison_figure(out / "comparison.png", groups, METRICS, pair, BOUNDS, DIFFERENCE_BOUNDS)
    return [out / "summary.md", out / "summary.csv", out / "comparison.png"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="norga summarize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run folders of one configuration (different seeds)")
    p.add_argument("--vs", nargs="+", type=Path, default=[], help="run folders of a second configuration")
    p.add_argument("--name", default=None, help="name of the first group (default: from the folder names)")
    p.add_argument("--vs-name", default=None, help="name of the --vs group")
    p.add_argument("--ignore", action="append", default=[], metavar="KEY",
                   help="config key (or section) allowed to differ inside a group, e.g. device (repeatable)")
    p.add_argument("--out", type=OUTPUT_FOLDER, default=None, help="write summary.md, summary.csv, comparison.png here")
    p.add_argument("--allow-mixed", action="store_true",
                   help="pool runs whose tasks were trained with different configs (norga train --force)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    problem = out_problem(args.out) if args.out is not None else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        groups, pair, between = build(args)
    except SummaryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = markdown(groups, pair, between)
    print(text)
    if args.out is not None:
        written = write_outputs(args.out, groups, pair, text)
        print("wrote " + ", ".join(str(p) for p in written))
    for g in groups:
        for p, why in g.excluded:
            print(f"warning: excluded {p}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
