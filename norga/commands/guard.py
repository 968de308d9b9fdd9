"""How every command fails: problems the user can fix as one ``error:`` line (exit 2; a diverged run: 3),
Ctrl-C or SIGTERM as one line saying what is saved (exit 130), bugs with their traceback.

Used by ``norga train | eval | routes | summarize | data``; imports nothing heavy.
"""
from __future__ import annotations

import errno
import signal
import sys
from typing import Callable, Optional

from ..config import ConfigError
from ..errors import DIVERGED_EXIT, NorgaError, TrainingDiverged, one_line

INTERRUPTED = 130  # the shell's status for a process stopped by SIGINT
_DISK = {errno.ENOSPC: "free some space", getattr(errno, "EDQUOT", errno.ENOSPC): "free some space",
         errno.EROFS: "make it writable or choose another folder"}  # OSErrors that are the disk's, not a bug


# ---- one-line errors --------------------------------------------------------
def user_error(err: BaseException) -> Optional[str]:
    """The one-line message for an error the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(err, (NorgaError, ConfigError)):
        return one_line(str(err))
    if isinstance(err, OSError) and err.errno in _DISK:
        where = f" {err.filename}" if err.filename else ""
        return (f"cannot write{where}: {err.strerror}; {_DISK[err.errno]}, then re-run the same command "
                "(files of completed tasks are intact)")
    if isinstance(err, PermissionError):
        return f"permission denied: {err.filename or one_line(str(err))}; check the permissions of that path"
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return (f"out of memory ({one_line(str(err))[:120] or 'MemoryError'}); lower the batch sizes "
                "(method.wtp.batch_size, eval_batch_size, method.tii.batch_size) or data.image_size")
    return None


def close_progress_bars() -> None:
    """Close the progress bars still open, so that a message starts on its own terminal line."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def guarded(action: Callable[[], int], on_interrupt: Callable[[], str]) -> int:
    """Run ``action``: user errors -> one line + exit 2 (a diverged run: 3); Ctrl-C/SIGTERM -> one line + 130."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread: leave SIGTERM alone
        previous = None
    try:
        return action()
    except KeyboardInterrupt:
        close_progress_bars()
        print(f"error: interrupted; {on_interrupt()}", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:  # noqa: BLE001 - filtered by user_error, bugs are re-raised
        message = user_error(err)
        if message is None:
            raise
        close_progress_bars()
        print(f"error: {message}", file=sys.stderr)
        return DIVERGED_EXIT if isinstance(err, TrainingDiverged) else 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
