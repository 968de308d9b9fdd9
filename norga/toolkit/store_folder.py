"""Which folder may hold a frozen-feature store (:mod:`norga.toolkit.feature_store`), checked without torch, so that
``norga train``, ``norga eval`` and ``norga reproduce`` refuse a bad ``--feature-cache`` before they create
anything.

A store's root carries the marker :data:`norga.outputs.STORE_MARKER` (``norga-feature-store.json``), which
makes it a zone of the write guard: outputs of other commands are never placed inside it, and the store
never writes outside it. A new or empty folder becomes a store; so does one that holds only an older norga's
space folders (32 hex digits, each with its ``space.json``); any other folder is refused. Jobs of a sweep may claim
one new store at the same moment: the temp file of a marker being written is not a foreign file, and a marker
renamed into place between two looks makes the folder a store, not a zone it lies inside (every write of the store
is a temp file renamed into place, so no lock is needed and no torn file is ever read).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import NorgaError
from ..outputs import STORE_MARKER, Zone, make_output_folder, write_output, zone_of

FORMAT = "norga-feature-store/1"
OPTION = "--feature-cache"


def claim_store(root: Path) -> Path:
    """Make ``root`` a feature store (its marker :data:`~norga.outputs.STORE_MARKER` makes it a zone of the write
    guard) once :func:`check_store` accepts it."""
    if check_store(root):
        return root
    make_output_folder(root, OPTION)
    write_output(root / STORE_MARKER, (json.dumps({"format": FORMAT}) + "\n").encode(), OPTION, Zone(root))
    return root


def check_store(root: Path) -> bool:
    """Whether ``root`` already is a feature store (True) or may become one (False: new, empty, or holding only
    an older norga's space folders); one line for any other path. Reads only: commands call it before they
    create anything, so a refused store leaves no started run folder behind."""
    root = Path(root)
    marker = root / STORE_MARKER
    if marker.is_file():
        try:
            ours = json.loads(marker.read_text()).get("format") == FORMAT
        except (OSError, ValueError, UnicodeDecodeError, AttributeError):
            ours = False
        if not ours:
            raise NorgaError(f"{OPTION} {root}: {marker} is not a norga feature-store marker; pass a new or empty "
                             "folder, or restore the marker")
        return True
    if root.exists() and not root.is_dir():
        raise NorgaError(f"{OPTION} {root} is a file; pass a folder (new, empty, or an earlier feature store)")
    foreign = sorted(p.name for p in root.iterdir() if not (_space_folder(p) or _marker_being_written(p))) \
        if root.is_dir() else []
    found = None if foreign else zone_of(root)
    if (foreign or found is not None) and marker.is_file():  # a concurrent job claimed it since the first look
        return check_store(root)
    if foreign:
        raise NorgaError(f"{OPTION} {root} holds files that are not a norga feature store ({', '.join(foreign[:5])}); "
                         "norga never mixes its files with yours: pass a new or empty folder")
    if found is not None:
        raise NorgaError(f"{OPTION} {root} lies inside the {found[1]} {found[0]}; pass a folder outside it")
    existing = next((p for p in (root, *root.parents) if p.exists()), root)
    if not os.access(existing, os.W_OK):
        raise NorgaError(f"{OPTION} {root}: {existing} is not writable; make it writable or pass another folder")
    return False


def _marker_being_written(path: Path) -> bool:
    """Whether ``path`` is the temp file of a marker another process is writing this moment (its atomic write:
    temp file, then rename): a store claimed by a concurrent job, not a file of the user's."""
    return path.name.startswith(f".{STORE_MARKER}.") and path.name.endswith(".tmp")  # by name: it may be gone


def _space_folder(path: Path) -> bool:
    """Whether ``path`` is a feature space folder: 32 hex digits, holding ``space.json``."""
    return (path.is_dir() and len(path.name) == 32 and all(c in "0123456789abcdef" for c in path.name)
            and (path / "space.json").is_file())
