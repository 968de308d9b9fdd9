"""Merging benchmark rows written by parallel processes into one results file.

Two processes must never write the same results file. To run a benchmark's arms or seeds side by side (two
torch processes of one thread each on a 2-core CPU, or one per GPU), give each its own ``--results`` stem and
merge them afterwards::

    python -m bench.real_data_cpu --only l2p --seeds 1 2 --results runs/lanes/a    # process 1
    python -m bench.real_data_cpu --only coda --seeds 1 2 --results runs/lanes/b   # process 2
    python -m bench.real_data_cpu --merge runs/lanes/a runs/lanes/b                # into bench/results/<regime>

A row is keyed by (run, seed) (:data:`RUN_SEED`; another benchmark passes its own :class:`Keying`, e.g.
``studies.task_ablation.run``'s (regime, level, seed, task)). :func:`merge_rows` refuses a key that two lanes give
different values for, and a key the results file already holds with other values unless told what to do with
such a *clash* (:data:`CLASH_MODES`): ``replace`` (a re-run meant to replace the row) or ``keep`` (a re-run that
checks the held row, e.g. on another machine: the held row stays, and the two must agree exactly on the keying's
``results`` fields, the accuracies, while other fields may differ by float noise; two lanes' re-runs of one key
likewise, the first lane's row taken); an identical row is taken once. Rows of arms the regime does not know
(``arm@label`` counts as ``arm``) are refused, so a lane of another regime cannot slip in.

Every benchmark's rows live in ``<stem>.json`` (a JSON list, one dict per row): :func:`load_rows` reads it (no
file: no rows), :func:`save_rows` replaces it atomically (a reader never sees half a file, even when a run is
killed mid-write) and :func:`rows_with` finds the rows that match given fields.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

from norga.files import atomic_write_bytes

Key = tuple


RESULT_SUFFIXES = (".json", ".md", ".png")


def result_file(stem: Path, suffix: str) -> Path:
    """The file of a results stem with ``suffix`` (one of :data:`RESULT_SUFFIXES`): ``runs/lanes/a``,
    ``runs/lanes/a.json`` and ``runs/lanes/a.md`` name the same stem; any other dot stays part of the name, so the
    stem ``runs/lanes/lr_x0.1`` gives ``runs/lanes/lr_x0.1.json`` (``Path.with_suffix`` would give ``lr_x0.json``)."""
    if suffix not in RESULT_SUFFIXES:
        raise ValueError(f"unknown results suffix {suffix!r}; use one of {', '.join(RESULT_SUFFIXES)}")
    path = Path(stem)
    if path.suffix in RESULT_SUFFIXES:
        path = path.with_suffix("")
    return path.with_name(path.name + suffix)


def rows_path(stem: Path) -> Path:
    """The JSON file of a results stem (``runs/lanes/a`` and ``runs/lanes/a.json`` name the same file)."""
    return result_file(stem, ".json")


def load_rows(stem: Path) -> List[dict]:
    """The rows of ``<stem>.json``; an empty list when the file does not exist yet."""
    path = rows_path(stem)
    return json.loads(path.read_text()) if path.is_file() else []


def save_rows(stem: Path, rows: Sequence[dict]) -> None:
    """Replace ``<stem>.json`` with ``rows`` atomically, creating its folder."""
    path = rows_path(stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(list(rows), indent=1) + "\n").encode())


def rows_with(rows: Sequence[dict], **fields) -> List[dict]:
    """The rows whose values equal ``fields`` (e.g. ``rows_with(rows, regime="evidence", seed=1)``)."""
    return [r for r in rows if all(r.get(k) == v for k, v in fields.items())]


class MergeError(ValueError):
    """Rows that cannot be merged; the message names the rows and the fix."""


class Keying(NamedTuple):
    """How one benchmark's rows are keyed: ``key`` (row -> key), ``text`` (key -> words for messages), ``group``
    (row -> the name that must be one of the known ones) and ``unknown`` (the message's tail for a row whose group
    is unknown; ``{groups}`` is replaced by the known names)."""
    key: Callable[[dict], Key]
    text: Callable[[Key], str]
    group: Callable[[dict], str]
    unknown: str
    results: Tuple[str, ...] = ("FA", "CA", "FM")  # with on_clash "keep": must agree exactly


RUN_SEED = Keying(key=lambda row: (row["run"], int(row["seed"])), text=lambda k: f"{k[0]} seed {k[1]}",
                  group=lambda row: row["run"].split("@")[0],
                  unknown="is not an arm of this regime (arms: {groups}); merge it with --regime of its own benchmark")
CLASH_MODES = ("refuse", "replace", "keep")


def _lane_rows(lanes: Sequence[Tuple[str, List[dict]]], groups: Sequence[str], keying: Keying,
               keep: bool = False) -> Dict[Key, dict]:
    """(lane name, rows) per lane -> one row per key; conflicting or unknown rows raise MergeError. With ``keep``
    two lanes' rows of one key may differ outside ``keying.results`` (a re-run): the first lane's row is taken."""
    merged: Dict[Key, Tuple[str, dict]] = {}
    for name, rows in lanes:
        if not rows:
            raise MergeError(f"{name}: no rows (is the path the stem of a results .json, without the suffix?)")
        for row in rows:
            key = keying.key(row)
            if keying.group(row) not in groups:
                raise MergeError(f"{name}: row {keying.text(key)} {keying.unknown.format(groups=sorted(groups))}")
            first = merged.get(key)
            if first is not None and first[1] != row and not (keep and _results_agree(first[1], row, keying)):
                raise MergeError(f"{first[0]} and {name} both hold {keying.text(key)} with different "
                                 "values: keep one of the two run folders and re-run that lane's report")
            merged.setdefault(key, (name, row))
    return {k: row for k, (_, row) in merged.items()}


def _lacks_results(row: dict, keying: Keying) -> bool:
    """Whether ``row`` misses one of the ``keying.results`` fields a re-run is compared by."""
    return any(f not in row for f in keying.results)


def _results_agree(a: dict, b: dict, keying: Keying) -> bool:
    """Both rows carry every ``keying.results`` field, with equal values (rows without them prove nothing)."""
    return not (_lacks_results(a, keying) or _lacks_results(b, keying)) and all(a[f] == b[f] for f in keying.results)


def merge_rows(existing: List[dict], lanes: Sequence[Tuple[str, List[dict]]], groups: Sequence[str],
               on_clash: str = "refuse", keying: Keying = RUN_SEED) -> Tuple[List[dict], List[Key], List[Key]]:
    """(merged rows, keys added, keys that clashed: replaced or kept). ``existing`` keeps its order; new rows are
    appended in lane order; a replaced row takes the place of the old one. ``groups``: the known arms (or levels,
    per ``keying``); ``on_clash``: one of :data:`CLASH_MODES`, for a key held with other values."""
    if on_clash not in CLASH_MODES:
        raise ValueError(f"on_clash {on_clash!r}: use one of {CLASH_MODES}")
    incoming = _lane_rows(lanes, groups, keying, keep=on_clash == "keep")
    held = {keying.key(r): r for r in existing}
    clashes = sorted(k for k, row in incoming.items() if k in held and held[k] != row)
    if clashes and on_clash == "refuse":
        listed = ", ".join(keying.text(k) for k in clashes)
        raise MergeError(f"the results already hold other values for {listed}; pass --replace to replace them "
                         "with the lanes' rows (the old values are then gone: keep a copy if they matter), or "
                         "--keep to keep the held rows of a re-run whose results agree")
    if on_clash == "keep":
        _check_results_agree(held, incoming, clashes, keying)
        incoming = {k: row for k, row in incoming.items() if k not in held}
    merged = [incoming.get(keying.key(r), r) for r in existing]
    added = [k for k in incoming if k not in held]
    merged += [incoming[k] for k in added]
    return merged, added, clashes


def _check_results_agree(held: Dict[Key, dict], incoming: Dict[Key, dict], keys: Sequence[Key],
                         keying: Keying) -> None:
    """MergeError naming the keys whose held and incoming rows differ in a ``keying.results`` field."""
    lacking = [k for k in keys if _lacks_results(held[k], keying) or _lacks_results(incoming[k], keying)]
    if lacking:
        raise MergeError(f"--keep: a held or incoming row of {', '.join(keying.text(k) for k in lacking)} has no "
                         f"{' / '.join(keying.results)} to compare; --keep cannot tell a re-run from other values "
                         "there: compare the rows yourself and pass --replace or drop one")
    differ = [k for k in keys if not _results_agree(held[k], incoming[k], keying)]
    if differ:
        raise MergeError(f"--keep: the lanes' rows differ from the held ones in a result ({', '.join(keying.results)})"
                         f" for {', '.join(keying.text(k) for k in differ)}: a re-run that does not reproduce the "
                         "results is a finding; compare the two before choosing one (--replace)")


def add_clash_arguments(parser) -> None:
    """The --replace / --keep options of a benchmark's --merge (argparse, mutually exclusive)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--replace", action="store_true", help="with --merge: lanes' rows replace differing rows")
    group.add_argument("--keep", action="store_true",
                       help="with --merge: held rows stay where a lane re-ran them; their results must agree")


def clash_mode(parser, args) -> str:
    """The ``on_clash`` of the parsed ``args`` (exits through ``parser`` when --replace / --keep come without
    --merge)."""
    mode = "replace" if args.replace else "keep" if args.keep else "refuse"
    if mode != "refuse" and not args.merge:
        parser.error(f"--{mode} goes with --merge (it says what to do with rows the results hold with other values)")
    return mode


def merge_summary(added: Sequence[Key], clashes: Sequence[Key], total: int, on_clash: str) -> str:
    """The one line a --merge prints: rows added, replaced or kept, in all."""
    verb = "kept (re-run, results agree)" if on_clash == "keep" else "replaced"
    return f"{len(added)} rows added, {len(clashes)} {verb}, {total} in all"
