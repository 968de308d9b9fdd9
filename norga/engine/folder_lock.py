"""One process per run folder: an exclusive ``flock`` on ``DIR/.lock``, which holds the owner's pid.

The kernel drops the lock when its process dies (even by SIGKILL), so a crashed
run never leaves a stale lock behind; a normal release also removes the file.
A second process is refused with one line naming the owner's pid. Without
``fcntl`` (Windows) folders are not locked.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..errors import RunError
from ..files import file_mode, write_failure

try:  # POSIX advisory locks
    import fcntl
except ImportError:  # pragma: no cover - not on the supported platforms
    fcntl = None


class RunLock:
    """Exclusive ``flock`` on ``DIR/.lock``, which holds the owner's pid.

    The kernel drops the lock when its process dies (even by SIGKILL), so a crashed
    run never leaves a stale lock; the file is removed on a normal release.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
            except OSError as err:
                raise write_failure(self.path, err) from err
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunError(f"{self.path.parent} is in use by another norga process (pid {owner}); wait for it "
                               "to finish or stop it, or choose another --output-dir") from None
            if self._same_file(fd):
                break
            os.close(fd)  # the previous owner removed the file between our open and flock: retry
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
