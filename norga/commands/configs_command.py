"""``norga configs``: the shipped configs (:mod:`norga.config.shipped`) listed, printed or copied for editing.

    norga configs                                # every shipped config's name and one-line description
    norga configs show smoke/l2p                 # print one (its base: is relative to its file)
    norga configs copy cifar100_norga my_configs # copy one and its base: chain into my_configs/, for editing
    norga configs resolve cifar100_norga --set seed=1   # a config resolved, each value with its origin
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from ..outputs import OUTPUT_FOLDER
from ..config.origins import resolved_lines
from ..config.shipped import copy_config, description, shipped_names, shipped_path, shipped_root, unknown_name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="norga configs", description="The configs shipped with norga: list them, "
                                "print one, copy one for editing. norga train --config NAME runs one (a file "
                                "named NAME in the current folder is read instead).",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n")[1])
    commands = p.add_subparsers(dest="command", metavar="{list,show,copy,resolve}")
    commands.add_parser("list", help="every shipped config with its description (the default)")
    show = commands.add_parser("show", help="print a shipped config")
    show.add_argument("name", help="a shipped config's name, e.g. smoke or smoke/l2p")
    copy = commands.add_parser("copy", help="copy a shipped config and its base: chain into a folder, for editing")
    copy.add_argument("name", help="a shipped config's name, e.g. cifar100_norga")
    copy.add_argument("folder", type=OUTPUT_FOLDER, metavar="DIR", help="where to write the files (created if "
                      "missing); norga never replaces a file of yours there, nor a copy you edited")
    copy.add_argument("--force", action="store_true", help="replace an earlier, unedited copy of these files")
    resolve = commands.add_parser("resolve", help="a config (file or shipped name) fully resolved: base chain merged, "
                                  "--set applied, defaults filled in, each value with its origin")
    resolve.add_argument("config", help="a config file or a shipped config's name, e.g. cifar100_norga")
    resolve.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config value, as norga train --set (repeatable)")
    return p


def listing() -> List[str]:
    """What ``norga configs`` prints: a heading line, then one line per shipped config."""
    root = shipped_root()
    names = shipped_names(root)
    width = max(map(len, names))
    lines = [f"{len(names)} shipped configs in {root} (norga train --config NAME runs one; "
             "norga configs show NAME prints it; norga configs copy NAME DIR copies it for editing):"]
    lines += [f"  {name:<{width}}  {description(root / f'{name}.yaml') or '(no description)'}" for name in names]
    return lines


def show(name: str) -> str:
    """The text of the shipped config ``name``."""
    path = shipped_path(name)
    if path is None:
        raise unknown_name(name, files_too=False)
    return path.read_text(encoding="utf-8")


def copy(name: str, folder: Path, force: bool) -> str:
    """Copy ``name`` (and its base chain) into ``folder``; the line saying what was written."""
    written = copy_config(name, folder, force)
    bases = f" with its base chain {', '.join(map(str, written[1:]))}" if written[1:] else ""
    return f"copied {name} to {written[0]}{bases}; edit it, then: norga train --config {written[0]}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``norga configs`` (``norga.commands.cli`` wraps it in the error boundary)."""
    args = parser().parse_args(list(argv or []))
    if args.command == "show":
        sys.stdout.write(show(args.name))
    elif args.command == "copy":
        print(copy(args.name, args.folder, args.force))
    elif args.command == "resolve":
        _print_piped("\n".join(resolved_lines(args.config, args.overrides)))
    else:
        _print_piped("\n".join(listing()))
    return 0


def _print_piped(text: str) -> None:
    """Print ``text``; a reader that stops early (``norga configs | head``) ends the output quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
