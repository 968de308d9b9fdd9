"""Whole runs of a cross-check, both sides side by side: ``python -m crosscheck.harness.seed_runs METHOD DIR``.

DIR holds the reference's result files ``ref_<METHOD>_s<seed>.json`` (``pilot_runs_reference.py`` for ranpac, aper
and ease; ``mos_reference_run.py``; ``slca_reference_run.py``; ``tuna_reference_run.py``;
``hidelora_reference_run.py``) and norga's run folders ``norga_<METHOD>_s<seed>/``
(``norga train --config configs/crosscheck/<METHOD>.yaml --set seed=<seed>``). Both sides' accuracy matrices are
scored by :mod:`norga.reports.metrics`. Printed: a markdown table of FA, CA, FM (%) and the last row's per-task
accuracies per seed and side, each side's mean FA with its 95% t interval, and the seed-paired FA difference
norga − reference with its 95% t interval (:mod:`norga.reports.summary_stats`). Unfinished norga runs
(``completed_tasks`` below the task count) and missing files are left out and named.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Sequence

from norga.reports.metrics import summarize
from norga.reports.summary_stats import describe, paired

TASKS = 5
# method -> (key of the reference file's accuracy rows, what one accuracy unit of that file is as a fraction)
REFERENCE_ROWS = {
    "ranpac": ("matrix", 0.01), "aper": ("matrix", 0.01), "ease": ("matrix", 0.01),  # pilot_runs_reference: %
    "mos": ("matrix", 1.0),  # mos_reference_run: fractions
    "slca": ("acc_matrix", 1.0),  # slca_reference_run: fractions
    "tuna": ("acc_matrix", 1.0),  # tuna_reference_run: fractions
    "hidelora": ("matrix", 0.01),  # hidelora_reference_run: %
}
SEEDS = {"ranpac": (1993, 1994, 1995), "aper": (1993, 1994, 1995), "ease": (1993, 1994, 1995),
         "mos": (40, 41, 42, 43, 44, 45), "slca": (1993, 1996, 1997), "tuna": (1993, 1994, 1995, 1996, 1997, 1998),
         "hidelora": (42, 43, 44)}


def as_s(after_rows: Sequence[Sequence[float]], unit: float = 1.0) -> List[list]:
    """Rows of a reference driver (row t: accuracies on tasks 0..t after task t, in ``unit``) as
    S[i][t] fractions (None for t < i), the layout :func:`norga.reports.metrics.summarize` reads."""
    n = len(after_rows)
    return [[after_rows[t][i] * unit if t >= i else None for t in range(n)] for i in range(n)]


def reference_s(method: str, path: Path) -> List[list]:
    key, unit = REFERENCE_ROWS[method]
    rows = json.loads(path.read_text())[key]
    if len(rows) != TASKS:
        raise ValueError(f"{path}: {len(rows)} of {TASKS} tasks; rerun that reference seed")
    return as_s(rows, unit)


def scores(method: str, folder: Path, seeds: Sequence[int]) -> Dict[str, Dict[int, dict]]:
    """side -> seed -> metrics (fractions) and the final row, of every finished run found in ``folder``."""
    out: Dict[str, Dict[int, dict]] = {"reference": {}, "norga": {}}
    for seed in seeds:
        ref, mine = folder / f"ref_{method}_s{seed}.json", folder / f"norga_{method}_s{seed}" / "metrics.json"
        for missing in (path for path in (ref, mine) if not path.is_file()):
            print(f"left out: {missing} (missing)")
        if ref.is_file():
            S = reference_s(method, ref)
            out["reference"][seed] = {**summarize(S), "last": [row[-1] for row in S]}
        if mine.is_file():
            run = json.loads(mine.read_text())
            if run.get("completed_tasks") != TASKS:
                print(f"left out: {mine} ({run.get('completed_tasks')} of {TASKS} tasks)")
                continue
            out["norga"][seed] = {**summarize(run["acc_matrix"]), "last": [row[-1] for row in run["acc_matrix"]]}
    return out


def report(runs: Dict[str, Dict[int, dict]]) -> List[str]:
    """The printed lines: the table, each side's mean FA, the paired difference (all in %)."""
    lines = ["| side | seed | FA | CA | FM | last row, per task |", "|---|---|---|---|---|---|"]
    for side, by_seed in runs.items():
        for seed, m in sorted(by_seed.items()):
            last = ", ".join(f"{100 * a:.0f}" for a in m["last"])
            lines.append(f"| {side} | {seed} | {100 * m['FA']:.1f} | {100 * m['CA']:.1f} | {100 * m['FM']:.1f} "
                         f"| {last} |")
    fa = {side: {s: 100 * m["FA"] for s, m in by_seed.items()} for side, by_seed in runs.items()}
    for side, values in fa.items():
        if values:
            e = describe(list(values.values()))
            lines.append(f"mean FA {side} (n={e.n}): {e.mean:.1f} [{e.low:.1f}, {e.high:.1f}]")
    if set(fa["norga"]) & set(fa["reference"]):
        seeds, diff = paired(fa["norga"], fa["reference"])
        each = ", ".join(f"{fa['norga'][s] - fa['reference'][s]:+.1f}" for s in seeds)
        lines.append(f"norga - reference FA over seeds {seeds}: {diff.mean:+.1f} [{diff.low:+.1f}, "
                     f"{diff.high:+.1f}] (per seed {each})")
    return lines


def main(argv=None, method: str = "") -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    if not method:
        p.add_argument("method", choices=sorted(REFERENCE_ROWS))
    p.add_argument("folder", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", help="default: the method's cross-check seeds")
    args = p.parse_args(argv)
    method = method or args.method
    print("\n".join(report(scores(method, args.folder, args.seeds or SEEDS[method]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
