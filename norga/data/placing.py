"""Placing extracted files into the user's ``--root`` through the write guard (:mod:`norga.outputs`).

Extraction streams every file into ``ROOT/.norga-partial/`` (the temp side of an atomic write, on the same file
system); placing renames it into place. A destination that does not exist yet is renamed whole (a folder of
30,000 images is one rename). Into an existing folder the archive's files are merged one by one: a file
already there with the same bytes is left as it is, any other existing file is replaced only if norga wrote it
and it is unchanged (:func:`norga.outputs.check_output`), else the run stops with one line naming it, before
anything is moved. The sha256 of the files norga verified is recorded in their folder's manifest
(``.norga-written.json``); image trees are not hashed (gigabytes, a manifest in every class folder), their
files are protected by the same-bytes rule.
"""
from __future__ import annotations

import filecmp
import os
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

from ..outputs import OutputRefused, check_output, make_output_folder, record_written, zone_of

OPTION = "--root"


def _kind(path: Path) -> str:
    return "folder" if path.is_dir() else "file"


def _plan_one(src: Path, target: Path) -> List[Tuple[Path, Path]]:
    """The (staged, destination) renames placing ``src`` at ``target``; OutputRefused for a user's file."""
    if not target.exists() and not target.is_symlink():
        return [(src, target)]
    if src.is_dir() != target.is_dir() or target.is_symlink():
        raise OutputRefused(f"{OPTION} {target} is a {_kind(target)} where the archive has a {_kind(src)}; norga "
                            f"never replaces your files: move {target} away and run the same command again")
    if src.is_file():
        if filecmp.cmp(src, target, shallow=False):
            return []
        check_output(target, OPTION)
        return [(src, target)]
    return [move for child in sorted(src.iterdir()) for move in _plan_one(child, target / child.name)]


def plan(places: Sequence[Tuple[Path, Path]], root: Path) -> List[Tuple[Path, Path]]:
    """Every rename of ``places`` ((staged path, destination under ``root``)), checked before any is done."""
    found = zone_of(root)
    if found is not None:
        raise OutputRefused(f"{OPTION} {root} lies inside the {found[1]} {found[0]}, whose files norga manages; "
                            f"choose another {OPTION}")
    return [move for src, target in places for move in _plan_one(src, target)]


def place(moves: Sequence[Tuple[Path, Path]]) -> None:
    """Do the renames of :func:`plan` (folders created through the guard)."""
    for src, target in moves:
        make_output_folder(target.parent, OPTION)
        os.replace(src, target)


def record(hashes: Mapping[Path, str]) -> None:
    """Add ``{file: sha256}`` to the manifests of their folders (one write per folder)."""
    folders: Dict[Path, Dict[str, str]] = {}
    for path, digest in hashes.items():
        if Path(path).is_file():
            folders.setdefault(Path(path).parent, {})[Path(path).name] = digest
    for folder, new in folders.items():
        record_written(folder, new, OPTION)
