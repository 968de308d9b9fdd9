"""The SLCA whole runs side by side: ``python -m bench.crosscheck.slca_seeds DIR``.

DIR holds ``ref_slca_s<seed>.json`` (``bench/crosscheck/slca_reference_run.py``) and ``norga_slca_s<seed>/``
(``norga train --config configs/crosscheck/slca.yaml``). Both accuracy matrices are scored by
:mod:`norga.reports.metrics`; printed: FA, CA, FM per seed and side, and the seed-paired FA difference with its 95%
t interval (:func:`norga.reports.summary_stats.paired`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from norga.reports.metrics import summarize
from norga.reports.summary_stats import paired

SEEDS = (1993, 1996, 1997)
TASKS = 5


def as_s(after_rows) -> list:
    """The reference driver's rows (row t: accuracies on tasks 0..t after task t) as S[i][t] (None for t < i)."""
    n = len(after_rows)
    return [[after_rows[t][i] if t >= i else None for t in range(n)] for i in range(n)]


def scores(folder: Path) -> dict:
    """side -> seed -> metrics (percent) of every run found in ``folder``."""
    out: dict = {"reference": {}, "norga": {}}
    for seed in SEEDS:
        ref, mine = folder / f"ref_slca_s{seed}.json", folder / f"norga_slca_s{seed}" / "metrics.json"
        if ref.is_file():
            out["reference"][seed] = summarize(as_s(json.loads(ref.read_text())["acc_matrix"]))
        if mine.is_file() and json.loads(mine.read_text()).get("completed_tasks") == TASKS:  # finished runs only
            out["norga"][seed] = summarize(json.loads(mine.read_text())["acc_matrix"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    runs = scores(args.folder)
    print("| side | seed | FA | CA | FM |\n|---|---|---|---|---|")
    for side, by_seed in runs.items():
        for seed, m in sorted(by_seed.items()):
            print(f"| {side} | {seed} | {100 * m['FA']:.1f} | {100 * m['CA']:.1f} | {100 * m['FM']:.1f} |")
    fa = {side: {s: 100 * m["FA"] for s, m in by_seed.items()} for side, by_seed in runs.items()}
    seeds, diff = paired(fa["norga"], fa["reference"])
    print(f"norga - reference FA over seeds {seeds}: {diff.mean:+.1f} [{diff.low:+.1f}, {diff.high:+.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
