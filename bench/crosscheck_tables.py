"""The cross-check's training runs as tables: the committed rows of ``bench/results/crosscheck_training.json``
(written by ``python -m crosscheck.harness.training --collect DIR``) rendered as the tables of the cross-check pages
(``bench/source_tables.py`` registers them). Accuracies are fractions in the JSON and percent in the tables.
Reads the rows only; the runs are parsed by crosscheck/harness/training.py (bench never imports crosscheck).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from bench.regimes import REPO
from norga.reports.summary_stats import describe, paired

RESULTS = REPO / "bench" / "results" / "crosscheck_training.json"
# the sides of a table, in table order: the reference code (fixed / as released), norga, norga before the named
# random streams (its initial values drawn from the stream of task 0's data order, docs/crosscheck.md), prompt-free
SIDES = ("reference_fixed", "norga", "norga_shared_stream", "reference_shipped", "simplecil")
# method -> (reference log/run prefix, norga config name, the seeds both sides ran)
METHODS: Dict[str, tuple] = {
    "l2p": ("ref_l2p", "norga_l2p", (42, 40, 44, 1, 2, 3, 4, 5)),  # more seeds: 3 gave +2.1 [+0.1, +4.1], 5 +2.4
    "dualprompt": ("ref_dual", "norga_dual", (42, 40, 44)),
    "sprompt_authors": ("ref_sprompt", "norga_sprompt_authors", (42, 40, 44)),
    "coda": ("ref_coda", "norga_coda", (0, 1, 2)),
}
PROMPT_FREE = "norga_simplecil"
METRICS = ("FA", "CA", "FM", "FM_official", "FGT_coda", "task_acc")


def _pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def per_seed_lines(rows: List[dict], method: str) -> List[str]:
    """Per-seed table of one method: side | seed | FA | CA | FM | FM_official | FGT_coda | task acc."""
    lines = ["| side | seed | " + " | ".join(METRICS) + " |", "|---|---|" + "---|" * len(METRICS)]
    for side in SIDES:
        for r in (r for r in rows if r["method"] == method and r["side"] == side):
            lines.append(f"| {side} | {r['seed']} | " + " | ".join(_pct(r[k]) for k in METRICS) + " |")
    return lines


def _difference(a: Dict[int, float], b: Dict[int, float]) -> str:
    """Mean of a − b over the seeds both have, in points, with the 95% t interval; '–' without common seeds."""
    if not set(a) & set(b):
        return "–"
    _, d = paired(a, b)
    return f"{100 * d.mean:+.1f}" + (f" [{100 * d.low:+.1f}, {100 * d.high:+.1f}]" if d.n > 1 else "")


def mean_lines(rows: List[dict]) -> List[str]:
    """Per method: mean FA of each side and norga − reference (paired by seed) with a 95% t interval; the same
    for norga's rows from before the named random streams where they exist."""
    lines = ["| method | reference FA | norga FA | norga − reference FA [95% CI] | norga before the named streams: "
             "FA, − reference | reference as shipped FA | SimpleCIL FA (prompt-free) |",
             "|---|---|---|---|---|---|---|"]
    for method in METHODS:
        by_side = {side: {r["seed"]: r["FA"] for r in rows if r["method"] == method and r["side"] == side}
                   for side in SIDES}
        if not by_side["norga"] or not by_side["reference_fixed"]:
            continue
        mean = {s: describe(list(v.values())) if v else None for s, v in by_side.items()}
        cell = lambda e: "–" if e is None else f"{100 * e.mean:.1f} (n={e.n})"  # noqa: E731
        before = mean["norga_shared_stream"]
        before = "–" if before is None else \
            f"{cell(before)}, {_difference(by_side['norga_shared_stream'], by_side['reference_fixed'])}"
        lines.append(f"| {method} | {cell(mean['reference_fixed'])} | {cell(mean['norga'])} | "
                     f"{_difference(by_side['norga'], by_side['reference_fixed'])} | {before} | "
                     f"{cell(mean['reference_shipped'])} | {cell(mean['simplecil'])} |")
    return lines


def per_task_lines(rows: List[dict], method: str) -> List[str]:
    """Per side, mean over seeds of each task's accuracy right after learning it (S[t, t]) and after the last
    task (S[t, T-1]): where the two sides' runs part."""
    lines = ["| side | seeds | accuracy right after learning task 0..T-1 | accuracy after the last task |",
             "|---|---|---|---|"]
    for side in ("reference_fixed", "norga", "norga_shared_stream"):
        mats = [np.array(r["acc_matrix"], dtype=float) for r in rows if r["method"] == method and r["side"] == side]
        if mats:
            diag = np.mean([np.diag(m) for m in mats], 0)
            last = np.mean([m[:, -1] for m in mats], 0)
            lines.append(f"| {side} | {len(mats)} | " + ", ".join(f"{100 * v:.1f}" for v in diag) + " | "
                         + ", ".join(f"{100 * v:.1f}" for v in last) + " |")
    return lines


def load(path: Path = RESULTS) -> List[dict]:
    return json.loads(path.read_text())["rows"] if path.exists() else []
