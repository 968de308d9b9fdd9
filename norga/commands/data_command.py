"""``norga data``: prepare and check benchmark folders.

    norga data prepare cifar100 --root DATA                    # download, verify, extract (idempotent)
    norga data prepare imagenet_r --root DATA --mirror ARCHIVES  # take the archives from a folder instead
    norga data prepare cub200 --root DATA --offline            # print the URLs and the layout to place by hand
    norga data prepare five_datasets --root DATA --check       # counts per class, unreadable images; read only
    norga data list                                            # benchmarks with a preparer, their files
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Dict, List, Sequence

from ..data.sources import DataError
from ..outputs import OUTPUT_FOLDER

HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="norga data", description="prepare and check benchmark folders")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{prepare,list}")
    prep = commands.add_parser("prepare", help="download, verify and extract a benchmark (or --check it)")
    prep.add_argument("benchmark", help="cifar100, imagenet_r, cub200 or five_datasets")
    prep.add_argument("--root", type=OUTPUT_FOLDER, default=None,
                      help="the data folder (data.root of your configs; default: the one the "
                      "shipped configs read, e.g. data/cifar100; norga data list shows each)")
    prep.add_argument("--mirror", help="a folder holding the archives (same names); used instead of downloading")
    prep.add_argument("--offline", action="store_true", help="download nothing: print the URLs and the layout")
    prep.add_argument("--sha256", action="append", default=[], metavar="NAME=HEX",
                      help="check file NAME against this sha256 instead of the shipped checksum (repeatable)")
    prep.add_argument("--check", action="store_true",
                      help="validate the folder (counts per class, unreadable images); modifies nothing")
    prep.add_argument("--no-decode", action="store_true", help="with --check: do not decode the images")
    prep.add_argument("--per-class", action="store_true", help="with --check: print every class's count")
    prep.add_argument("--no-progress", action="store_true", help="no progress bars")
    commands.add_parser("list", help="the benchmarks norga data prepare knows, with their files")
    return parser


def parse_sha256(values: Sequence[str]) -> Dict[str, str]:
    """``["NAME=HEX", ...]`` -> {NAME: hex}; DataError for a malformed value."""
    out = {}
    for value in values:
        name, _, digest = value.partition("=")
        if not name or not HEX64.match(digest):
            raise DataError(f"--sha256 {value!r}: expected NAME=<64 hex digits>, NAME a file of the benchmark "
                            "(norga data list shows them)")
        out[name] = digest.lower()
    return out


def list_lines() -> List[str]:
    """Each benchmark with a preparer and its files (name, checksum, source)."""
    from ..data.prepare import PREPARERS, get_preparer

    get_preparer("cifar100")  # registers the shipped preparers
    lines = []
    for name, preparer in sorted(PREPARERS.items()):
        lines += [f"{name}:", f"  default --root {preparer.root} (data.root of the shipped configs)"]
        lines += [f"  {a.name}  {a.checksum or 'no published checksum'}  ({a.source})" for a in preparer.archives]
    return lines


def run_data_command(args) -> int:
    """The ``norga data`` command after parsing; DataError for anything the user can fix."""
    from ..data.check import MAX_LISTED, check_benchmark
    from ..data.prepare import get_preparer, prepare

    if args.command == "list":
        print("\n".join(list_lines()))
        return 0
    if args.root is None:
        args.root = get_preparer(args.benchmark).root
    if args.check:
        lines, problems = check_benchmark(args.benchmark, args.root, decode=not args.no_decode,
                                          per_class=args.per_class, progress=not args.no_progress)
        if lines:
            print("\n".join(lines))
        for problem in problems[:MAX_LISTED]:
            print(f"problem: {problem}")
        if problems:
            more = f" ({len(problems) - MAX_LISTED} more not shown)" if len(problems) > MAX_LISTED else ""
            raise DataError(f"{args.benchmark} under {args.root}: --check found {len(problems)} problems{more}, "
                            f"first: {problems[0]}")
        print(f"{args.benchmark} under {args.root}: no problems found")
        return 0
    lines = prepare(args.benchmark, args.root, mirror=args.mirror, offline=args.offline,
                    sha256=parse_sha256(args.sha256), progress=not args.no_progress)
    print("\n".join(lines))
    return 0


def main(argv: Sequence[str]) -> int:
    """Entry point of ``norga data``: one ``error:`` line and exit status 2 for a problem the user can fix."""
    from .guard import guarded

    args = _parser().parse_args(list(argv))
    return guarded(lambda: run_data_command(args), lambda: "nothing is half-extracted; run the same command again")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
