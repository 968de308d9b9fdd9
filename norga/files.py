"""Durable file writes shared by every layer: atomic replace, file permissions, one-line write errors.

``atomic_write_bytes`` writes to a temp file in the same folder, fsyncs it, renames it over the old
file and fsyncs the folder, so an interrupted write never replaces a good file; files get the
permissions of any file the user creates (0666 minus the umask).
"""
from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

from .errors import RunError

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


def _umask() -> int:
    """The process umask (read without changing it where /proc allows)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode() -> int:
    """Permissions of a newly created regular file: 0666 minus the umask."""
    return 0o666 & ~_umask()


def write_failure(path: Path, err: OSError, option: str = "--output-dir") -> RunError:
    """One-line error for a failed write (disk full, read-only or unwritable folder, ...); ``option``: the command's
    option choosing where it writes."""
    reason = err.strerror or str(err)
    if err.errno in _FULL:
        fix = "free some space"
    elif err.errno in _READ_ONLY:
        fix = f"make the folder writable or choose another {option}"
    else:
        fix = "check the folder"
    return RunError(f"cannot write {path}: {reason}; {fix}, then re-run the same command "
                    "(files of completed tasks are intact)")


def _write(f, data: bytes, path: Path) -> None:
    """Write all of ``data`` for ``path`` into the open temp file ``f`` (a seam for fault-injection tests)."""
    f.write(data)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (no-op where folders cannot be fsync'ed)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, option: str = "--output-dir") -> None:
    """Temp file in the same folder + fsync + rename + folder fsync: readers never see a partial file.

    A failure (e.g. disk full) leaves the previous file untouched and raises :class:`RunError` (naming ``option``,
    the command's option choosing where it writes, as the way around a read-only folder).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise write_failure(path, err, option) from err
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            _write(f, data, path)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise write_failure(path, err, option) from err
        raise
    fsync_dir(path.parent)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (any size, constant memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
