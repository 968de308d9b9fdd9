"""Aggregate run folders over seeds: mean ± std and 95% intervals, paired differences, a figure.

    python -m norga.summarize runs/c100_norga_s42 runs/c100_norga_s43 runs/c100_norga_s44 \\
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
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from .summary_stats import BOUNDS, CLIPPED, DIFFERENCE_BOUNDS, Estimate, clip_note, describe, paired, shown_interval

METRICS: Tuple[str, ...] = ("FA", "CA", "FM", "BWT", "TIL FA", "TII acc")
IGNORED_KEYS: Tuple[str, ...] = ("seed", "logging")  # never change what a run learns
PAPER_METRICS: Tuple[str, ...] = ("FA", "CA", "FM")


class SummaryError(ValueError):
    """The run folders cannot be summarised together (message says why)."""


@dataclass
class Run:
    path: Path
    config: dict
    metrics: dict

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", self.metrics.get("seed")))

    def values(self) -> Dict[str, float]:
        """Metric name -> value in % (see METRICS)."""
        m = self.metrics
        tii = m.get("tii_accuracy") or []
        raw = {"FA": m.get("FA"), "CA": m.get("CA"), "FM": m.get("FM"), "BWT": m.get("BWT"),
               "TIL FA": m.get("til_FA"), "TII acc": sum(tii) / len(tii) if tii else None}
        return {k: math.nan if v is None else 100.0 * float(v) for k, v in raw.items()}


@dataclass
class Group:
    name: str
    runs: List[Run]
    excluded: List[Tuple[Path, str]] = field(default_factory=list)

    @property
    def seeds(self) -> List[int]:
        return [r.seed for r in self.runs]

    def by_seed(self, metric: str) -> Dict[int, float]:
        return {r.seed: r.values()[metric] for r in self.runs}

    def estimates(self) -> Dict[str, Estimate]:
        return {k: describe([r.values()[k] for r in self.runs]) for k in METRICS}


def load_run(path: Path, allow_mixed: bool = False) -> Tuple[Optional[Run], str]:
    """(Run, "") for a finished run, or (None, reason) for a folder to exclude (a failed run: its reason).

    A run whose tasks were trained with different configs (``--force``; ``mixed_config`` in metrics.json) is
    refused with a SummaryError unless ``allow_mixed``: its config.yaml describes only its last tasks."""
    path = Path(path)
    cfg_file, metrics_file = path / "config.yaml", path / "metrics.json"
    if not path.is_dir():
        return None, "not a folder"
    if not cfg_file.is_file():
        return None, "no config.yaml (not a norga run folder?)"
    if not metrics_file.is_file():
        return None, "no metrics.json (no task completed yet)"
    try:
        config = yaml.safe_load(cfg_file.read_text()) or {}
        metrics = json.loads(metrics_file.read_text())
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        return None, f"unreadable config.yaml or metrics.json ({err.__class__.__name__})"
    done, total = metrics.get("completed_tasks"), metrics.get("num_tasks")
    stopped = metrics.get("stopped") or {}
    if metrics.get("status") == "failed":
        return None, f"failed in task {stopped.get('task')}: {stopped.get('reason', 'no reason recorded')}"
    if done is None or total is None or done < total:
        how = f" (interrupted in task {stopped.get('task')})" if metrics.get("status") == "interrupted" else ""
        return None, f"incomplete: {done}/{total} tasks completed{how}"
    if metrics.get("mixed_config") and not allow_mixed:
        changes = [sorted(h.get("changed", {})) for h in metrics.get("config_history", [])[1:]]
        raise SummaryError(f"{path} was trained with different configs across its tasks (--force; changed: "
                           f"{changes}, see config_history in its metrics.json): its numbers are not those of one "
                           "config; leave it out, or pass --allow-mixed to pool it anyway")
    return Run(path, config, metrics), ""


def flatten(config: dict, prefix: str = "") -> Dict[str, object]:
    """Nested config -> {"wtp.epochs": 3, ...}; lists stay values."""
    flat: Dict[str, object] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def _ignored(key: str, ignore: Sequence[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in ignore)


def differing_keys(configs: Sequence[dict], ignore: Sequence[str] = IGNORED_KEYS) -> Dict[str, list]:
    """Flattened keys whose values are not all equal -> the value of each config (missing: '<absent>')."""
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    diff = {}
    for key in keys:
        values = [f.get(key, "<absent>") for f in flats]
        if not _ignored(key, ignore) and any(v != values[0] for v in values[1:]):
            diff[key] = values
    return diff


def check_comparable(group: Group, ignore: Sequence[str]) -> None:
    """Raise SummaryError naming every config key that differs between the group's runs, or a repeated seed."""
    diff = differing_keys([r.config for r in group.runs], ignore)
    if diff:
        lines = [f"  {key}: " + ", ".join(f"{r.path.name}={v!r}" for r, v in zip(group.runs, values))
                 for key, values in diff.items()]
        raise SummaryError(f"runs of group '{group.name}' are not comparable: their configs differ in more than "
                           f"the seed ({len(diff)} key(s)):\n" + "\n".join(lines) +
                           "\n(pass --ignore KEY to accept a difference, or summarise the groups separately)")
    seeds = group.seeds
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        names = [r.path.name for r in group.runs if r.seed in repeated]
        raise SummaryError(f"group '{group.name}' has several runs with seed(s) {repeated} ({', '.join(names)}): "
                           "seeds must differ to be averaged")


def group_name(paths: Sequence[Path], fallback: str) -> str:
    """A group's name from its folders: the shared folder name with a trailing seed (``_s42``, ``-seed43``,
    ``_44``) removed; for folders named by the seed only (``runs/norga/s42``) the shared parent folder; else
    the folders' common prefix; else the first folder's name and how many more (``alpha +1 more``), never a
    bare letter unless no folder has a name (then ``fallback``)."""
    resolved = [Path(p).resolve() for p in paths]
    stems = [_seedless(p.name) for p in resolved]
    if set(stems) == {""}:
        parents = {_seedless(p.parent.name) for p in resolved}
        if len(parents) == 1 and "" not in parents:
            return parents.pop()
    elif len(set(stems)) == 1:
        return stems[0]
    prefix = re.sub(r"[_\-.]+$", "", _common_prefix([p.name for p in resolved])) if any(stems) else ""
    if prefix:
        return prefix
    first = (stems[0] or resolved[0].name) if resolved else ""
    return (f"{first} +{len(resolved) - 1} more" if len(resolved) > 1 else first) if first else fallback


def _seedless(name: str) -> str:
    return re.sub(r"[_-]?(s|seed)?\d+$", "", name)


def _common_prefix(names: Sequence[str]) -> str:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def load_group(paths: Sequence[Path], name: Optional[str], fallback: str, ignore: Sequence[str],
               allow_mixed: bool = False) -> Group:
    runs, excluded = [], []
    for p in paths:
        run, reason = load_run(Path(p), allow_mixed)
        if run is None:
            excluded.append((Path(p), reason))
        else:
            runs.append(run)
    group = Group(name or group_name(paths, fallback), sorted(runs, key=lambda r: r.seed), excluded)
    if not group.runs:
        listed = "; ".join(f"{p}: {why}" for p, why in excluded)
        raise SummaryError(f"group '{group.name}' has no complete run to summarise ({listed})")
    check_comparable(group, ignore)
    return group


# ---- formatting ------------------------------------------------------------------------------

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


def csv_text(groups: Sequence[Group], pair: Optional[Tuple[List[int], Dict[str, Estimate]]]) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["kind", "group", "run", "metric", "n", "mean_pct", "std_pct", "ci95_low_pct", "ci95_high_pct",
                "seeds", "ci95_clipped"])
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
    groups = [load_group(args.runs, args.name, "A", ignore, allow_mixed=args.allow_mixed)]
    pair, between = None, {}
    if args.vs:
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


def write_outputs(out: Path, groups: Sequence[Group], pair, text: str) -> List[Path]:
    from .files import atomic_write_bytes
    from .plots import comparison_figure

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "summary.md", (text + "\n").encode("utf-8"))
    atomic_write_bytes(out / "summary.csv", csv_text(groups, pair).encode("utf-8"))
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
    p.add_argument("--out", type=Path, default=None, help="write summary.md, summary.csv, comparison.png here")
    p.add_argument("--allow-mixed", action="store_true",
                   help="pool runs whose tasks were trained with different configs (norga train --force)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
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
