"""What a benchmark needs under ROOT, and how ``norga data prepare`` verifies it before saying "prepared" or
"nothing to do".

A :class:`Needed` item is a file or folder under ROOT with its reader (:mod:`norga.data.content_readers`) and,
where one is published, the md5 of that very file: a file whose md5 matches is verified by checksum, any
other is verified by reading it (keys, shapes, sizes as published). A preparer lists its items in
``Preparer.contents``; one that lists none is verified by its ``--check`` (without decoding images).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .content_readers import ContentError, check_problems


@dataclass(frozen=True)
class Needed:
    """``path``: posix path under ROOT; ``read``: verifies it by reading (ContentError if wrong), returns what it
    read; ``md5``: the published md5 of this file (a match verifies it without reading)."""

    path: str
    read: Callable[[Path], str]
    md5: Optional[str] = None


@dataclass(frozen=True)
class Problem:
    """``path`` (as found on disk) fails: ``why``; ``incomplete``: missing, or a folder lacking files (which the
    archive can complete), rather than a file with the wrong content."""

    item: Needed
    path: Path
    why: str
    incomplete: bool


def file_hashes(path: Path) -> Dict[str, str]:
    """md5 and sha256 of a file, read once in 1 MiB blocks."""
    md5, sha256 = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            md5.update(block), sha256.update(block)
    return {"md5": md5.hexdigest(), "sha256": sha256.hexdigest()}


def needed_items(preparer) -> Tuple[Needed, ...]:
    """The preparer's items; without any, one per destination folder, verified by the preparer's check run on
    the folder holding it (destinations are then top-level names, as for the PTM folder benchmarks)."""
    if getattr(preparer, "contents", ()):
        return tuple(preparer.contents)
    check = check_problems(preparer.check)
    on_parent = lambda folder: check(folder.parent)  # noqa: E731 - the check reads ROOT, the item is ROOT/<dst>
    return tuple(Needed(dst, on_parent) for a in preparer.archives for _, dst in a.places)


def verify_item(item: Needed, path: Path) -> Tuple[str, Optional[str]]:
    """(how ``path`` was verified, its sha256 if a file); ContentError saying what is wrong."""
    if not path.exists():
        raise ContentError("is missing")
    hashes = file_hashes(path) if path.is_file() else {}
    if item.md5 is not None and hashes.get("md5") == item.md5:
        return "md5 verified", hashes["sha256"]
    return f"read ({item.read(path)})", hashes.get("sha256")


def locate(path: str, root: Path, staged: Mapping[str, Path]) -> Path:
    """Where item ``path`` is now: under a staged (extracted, not yet placed) destination, else under ROOT."""
    for dst, folder in staged.items():
        if under(dst, path):
            return folder / path[len(dst.rstrip("/")) + 1:] if path != dst else folder
    return root / path


def verify_items(items: Sequence[Needed], where: Callable[[str], Path]
                 ) -> Tuple[List[Tuple[Needed, Path, str, Optional[str]]], List[Problem]]:
    """([(item, path, how, sha256)] verified, [Problem]) for ``items``, each found at ``where(item.path)``."""
    good, bad = [], []
    for item in items:
        path = where(item.path)
        try:
            how, digest = verify_item(item, path)
        except ContentError as err:
            incomplete = not path.exists() or path.is_dir()
            bad.append(Problem(item, path, str(err), incomplete))
        except OSError as err:
            bad.append(Problem(item, path, f"cannot be read ({err.strerror or err})", False))
        else:
            good.append((item, path, how, digest))
    return good, bad


def under(dst: str, path: str) -> bool:
    """Whether item ``path`` is destination ``dst`` or inside it."""
    return path == dst or path.startswith(dst.rstrip("/") + "/")


def covers(archive, path: str) -> bool:
    """Whether one of ``archive``'s destinations holds item ``path``."""
    return any(under(dst, path) for _, dst in archive.places)


def summary(benchmark: str, verified: Sequence[Tuple[Needed, Path, str, Optional[str]]]) -> str:
    """One line: how many needed files and folders were verified, by checksum and by reading."""
    by_sum = sum(how.startswith("md5") for _, _, how, _ in verified)
    return (f"{benchmark}: verified {len(verified)} needed files and folders ({by_sum} by published checksum, "
            f"{len(verified) - by_sum} by reading them)")


def bad_file_error(benchmark: str, problem: Problem, fix: str) -> str:
    """The one line for a file in place whose content is not what ``benchmark`` needs."""
    return f"{problem.path}: {problem.why}; it is not the file {benchmark} needs: {fix}"
