"""Merging benchmark rows written by parallel processes into one results file.

Two processes must never write the same results file. To run a benchmark's arms or seeds side by side (two
torch processes of one thread each on a 2-core CPU, or one per GPU), give each its own ``--results`` stem and
merge them afterwards::

    python -m bench.real_data_cpu --only l2p --seeds 1 2 --results runs/lanes/a    # process 1
    python -m bench.real_data_cpu --only coda --seeds 1 2 --results runs/lanes/b   # process 2
    python -m bench.real_data_cpu --merge runs/lanes/a runs/lanes/b                # into bench/results/<regime>

A row is keyed by (run, seed). :func:`merge_rows` refuses a key that two lanes give different values for, and a
key the results file already holds with other values unless ``replace`` (a re-run that is meant to replace the
row); an identical row is taken once. Rows of arms the regime does not know (``arm@label`` counts as ``arm``)
are refused, so a lane of another regime cannot slip in.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

Key = Tuple[str, int]


class MergeError(ValueError):
    """Rows that cannot be merged; the message names the rows and the fix."""


def _key(row: dict) -> Key:
    return row["run"], int(row["seed"])


def _lane_rows(lanes: Sequence[Tuple[str, List[dict]]], arms: Sequence[str]) -> Dict[Key, dict]:
    """(lane name, rows) per lane -> one row per key; conflicting or unknown rows raise MergeError."""
    merged: Dict[Key, Tuple[str, dict]] = {}
    for name, rows in lanes:
        if not rows:
            raise MergeError(f"{name}: no rows (is the path the stem of a results .json, without the suffix?)")
        for row in rows:
            if row["run"].split("@")[0] not in arms:
                raise MergeError(f"{name}: row {row['run']!r} seed {row['seed']} is not an arm of this regime "
                                 f"(arms: {sorted(arms)}); merge it with --regime of its own benchmark")
            key = _key(row)
            if key in merged and merged[key][1] != row:
                raise MergeError(f"{merged[key][0]} and {name} both hold {key[0]} seed {key[1]} with different "
                                 "values: keep one of the two run folders and re-run that lane's report")
            merged.setdefault(key, (name, row))
    return {k: row for k, (_, row) in merged.items()}


def merge_rows(existing: List[dict], lanes: Sequence[Tuple[str, List[dict]]], arms: Sequence[str],
               replace: bool = False) -> Tuple[List[dict], List[Key], List[Key]]:
    """(merged rows, keys added, keys replaced). ``existing`` keeps its order; new rows are appended in lane order;
    a replaced row takes the place of the old one."""
    incoming = _lane_rows(lanes, arms)
    held = {_key(r): r for r in existing}
    clashes = sorted(k for k, row in incoming.items() if k in held and held[k] != row)
    if clashes and not replace:
        listed = ", ".join(f"{run} seed {seed}" for run, seed in clashes)
        raise MergeError(f"the results already hold other values for {listed}; pass --replace to replace them "
                         "with the lanes' rows (the old values are then gone: keep a copy if they matter)")
    merged = [incoming.get(_key(r), r) for r in existing]
    added = [k for k in incoming if k not in held]
    merged += [incoming[k] for k in added]
    return merged, added, clashes
