"""The one write guard: every file a norga command writes goes through :func:`write_output` (or, for a
folder, :func:`make_output_folder`), which refuses to replace anything norga did not write.

norga knows what it wrote in two ways:

* **zones**: a folder that norga owns as a whole carries a marker file (:data:`ZONE_MARKERS`: a run folder's
  ``norga-run.json``, an export's ``norga-export.json``, a feature store's ``norga-feature-store.json``). Only
  that folder's own command writes inside it (the caller names the zone it owns with :class:`Zone`, and may
  restrict itself to some names, as ``norga eval`` to ``eval.json``); any other output placed inside a zone is
  refused, whatever its name, so an output never lands among a run's or an export's own files;
* **per-folder manifests**: outside zones, every file norga writes is recorded, with the SHA-256 of its
  bytes, in ``.norga-written.json`` of its folder (:data:`MANIFEST`). An existing file may be replaced only if
  that manifest lists it and its bytes are still the ones norga wrote: a file of the user's, or one the user
  edited since, is refused with one line naming it and the fix.

Writes are atomic (:func:`norga.files.atomic_write_bytes`). Folders the guard creates in this process are
remembered, so the error boundary (:func:`undo_new_folders`) removes those still empty when a command fails:
nothing is left half-created. This module imports nothing heavy.
"""
from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import FrozenSet, List, Mapping, Optional, Tuple

from .errors import RunError
from .files import atomic_write_bytes, sha256_file, sha256_hex

MANIFEST = ".norga-written.json"
MANIFEST_FORMAT = "norga-written/1"
# marker file -> what the folder is (a zone: norga owns every file in it)
RUN_MARKER, EXPORT_MARKER, STORE_MARKER = "norga-run.json", "norga-export.json", "norga-feature-store.json"
ZONE_MARKERS = {RUN_MARKER: "run folder", EXPORT_MARKER: "export", STORE_MARKER: "feature store"}

_new_folders: List[Path] = []  # folders this process created through the guard, oldest first


class OutputPath:
    """The argparse ``type`` of every option that names where a command writes (``kind``: ``"file"`` or
    ``"folder"``): it marks the option for the command-tree test (``tests/test_write_guard.py`` tries a user's,
    a run's and an export's file on each) and refuses an empty path at parse time."""

    def __init__(self, kind: str):
        self.kind = kind
        self.__name__ = f"output {kind}"  # argparse names the type in its messages

    def __call__(self, text: str) -> Path:
        if not str(text).strip():
            import argparse

            raise argparse.ArgumentTypeError(f"an {self.__name__} path must not be empty")
        return Path(text)


OUTPUT_FILE, OUTPUT_FOLDER = OutputPath("file"), OutputPath("folder")


class OutputRefused(RunError):
    """An output path the guard will not write (a user's file, a zone's own file, a folder where a file goes)."""


@dataclass(frozen=True)
class Zone:
    """A norga-owned folder the calling command writes inside: ``root``, and the relative names (posix, e.g.
    ``eval.json`` or ``state/task_00.json``) it may write there (None: any)."""

    root: Path
    names: Optional[FrozenSet[str]] = None

    def allows(self, relative: str) -> bool:
        return self.names is None or relative in self.names


def zone_of(path: Path) -> Optional[Tuple[Path, str]]:
    """(root, kind) of the innermost zone that holds ``path`` (``path`` itself included), or None."""
    path = _absolute(path)
    for folder in (path, *path.parents):
        for marker, kind in ZONE_MARKERS.items():
            try:
                if (folder / marker).is_file():
                    return folder, kind
            except OSError:
                continue
    return None


def _absolute(path: Path) -> Path:
    """``path`` made absolute with symlinks of existing parts resolved (a link into a run folder is caught)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def check_output(path: Path, option: str, zone: Optional[Zone] = None) -> None:
    """OutputRefused unless ``path`` (a file to write) may be written by a command whose output option is
    ``option`` and that owns ``zone`` (see the module docstring). Reads only."""
    try:
        _check_output(Path(path), option, zone)
    except OSError as err:  # e.g. a name too long for the file system, a folder without read permission
        raise OutputRefused(f"{option} {path}: {_reason(err)}; choose another {option}") from err


def _check_output(path: Path, option: str, zone: Optional[Zone]) -> None:
    if str(path) in ("", "."):
        raise OutputRefused(f"{option} is empty; give a file path")
    target = _absolute(path)
    relative = _inside(target, zone)
    if relative is not None:  # the caller's own folder (it checked that the folder is what it claims)
        if not zone.allows(relative):
            kind = ZONE_MARKERS.get(next((m for m in ZONE_MARKERS if (_absolute(zone.root) / m).is_file()), ""),
                                    "norga folder")
            only = ", ".join(sorted(zone.names or ()))
            raise OutputRefused(f"{option} {path} lies inside the {kind} {zone.root}, where this command writes only "
                                f"{only}; choose another {option}")
        if target.is_dir():
            raise OutputRefused(f"{option} {path} is a folder; give a file path")
        return
    found = zone_of(target.parent)
    if found is not None:
        root, kind = found
        raise OutputRefused(f"{option} {path} lies inside the {kind} {root}, whose files norga manages; "
                            f"write outputs outside it (choose another {option})")
    if target.is_dir():
        raise OutputRefused(f"{option} {path} is a folder; give a file path (e.g. {path / 'eval.json'})")
    if (target.exists() or target.is_symlink()) and not written_unchanged(target):
        raise OutputRefused(f"{option} {path} exists and norga did not write it (or it was edited since); norga "
                            f"never replaces your files: choose another {option}, or move {path} away")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(f"{option} {path}: {parent} is a file, not a folder; choose another {option}")
            break


def _inside(target: Path, zone: Optional[Zone]) -> Optional[str]:
    """``target``'s posix path relative to ``zone.root``, or None when there is no zone or it lies outside."""
    if zone is None:
        return None
    try:
        return target.relative_to(_absolute(zone.root)).as_posix()
    except ValueError:
        return None


def written_unchanged(path: Path) -> bool:
    """Whether the file ``path`` is listed in its folder's manifest with its current bytes."""
    if not path.is_file() or path.is_symlink():
        return False
    recorded = read_manifest(path.parent).get(path.name)
    try:
        return recorded is not None and sha256_file(path) == recorded
    except OSError:
        return False


def read_manifest(folder: Path) -> dict:
    """``{name: sha256}`` of the files norga wrote in ``folder`` (empty when it has no readable manifest)."""
    try:
        raw = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    files = raw.get("files") if isinstance(raw, dict) and raw.get("format") == MANIFEST_FORMAT else None
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def record_written(folder: Path, files: Mapping[str, str], option: str) -> None:
    """Add ``{name: sha256}`` of files norga wrote into ``folder`` (by a streamed write or a rename that did not
    pass through :func:`write_output`) to that folder's manifest."""
    listed = {**read_manifest(folder), **{str(k): str(v) for k, v in files.items()}}
    text = json.dumps({"format": MANIFEST_FORMAT, "files": dict(sorted(listed.items()))}, indent=1) + "\n"
    atomic_write_bytes(Path(folder) / MANIFEST, text.encode(), option)


def write_output(path: Path, data: bytes, option: str = "--output-dir", zone: Optional[Zone] = None) -> Path:
    """Write ``data`` to ``path`` through the guard: checked (:func:`check_output`), created folders
    remembered, written atomically, and recorded in the folder's manifest unless inside ``zone``."""
    path = Path(path)
    check_output(path, option, zone)
    make_output_folder(path.parent, option, zone)
    atomic_write_bytes(path, data, option)
    target = _absolute(path)
    if path.name not in ZONE_MARKERS and _inside(target, zone) is None and zone_of(target.parent) is None:
        record_written(path.parent, {path.name: sha256_hex(data)}, option)
    return path


def edit_named_file(path: Path, data: bytes, option: str) -> Path:
    """Replace the file the user named with ``option`` for norga to edit (e.g. ``norga reproduce --readme FILE``:
    the block between norga's markers; the caller checked them) atomically: the one kind of user file norga
    changes, and only when asked by name. Never inside a zone."""
    path = Path(path)
    found = zone_of(_absolute(path).parent)
    if found is not None:
        raise OutputRefused(f"{option} {path} lies inside the {found[1]} {found[0]}, whose files norga manages; "
                            f"choose another {option}")
    if not path.is_file():
        raise OutputRefused(f"{option} {path} is not a file; give the file to edit")
    atomic_write_bytes(path, data, option)
    return path


def make_output_folder(folder: Path, option: str = "--output-dir", zone: Optional[Zone] = None) -> Path:
    """Create ``folder`` (and its missing parents) for outputs, remembering what was created; one line if a part
    of it is a file or cannot be created."""
    folder = Path(folder)
    missing = []
    try:
        for part in (folder, *folder.parents):
            if part.exists():
                if not part.is_dir():
                    raise OutputRefused(f"{option} {folder}: {part} is a file, not a folder; choose another {option}")
                break
            missing.append(part)
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunError(f"cannot create {folder}: {_reason(err)}; choose another {option}") from err
    _new_folders.extend(reversed(missing))
    return folder


def _reason(err: OSError) -> str:
    if err.errno == errno.ENAMETOOLONG:
        return "a name in the path is too long for this file system"
    return err.strerror or str(err)


def undo_new_folders() -> List[Path]:
    """Remove the folders this process created through the guard that are still empty (newest first); returns
    them. Called by the error boundary so that a failed command leaves no empty shells behind."""
    removed = []
    while _new_folders:
        folder = _new_folders.pop()
        try:
            folder.rmdir()  # only an empty folder goes
            removed.append(folder)
        except OSError:
            continue
    return removed


def forget_new_folders() -> None:
    """A command succeeded: its new folders are kept."""
    _new_folders.clear()
