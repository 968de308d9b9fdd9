"""The error boundary of every ``norga`` command (:func:`guarded`): how a command fails.

* a problem the user can fix is one line ``error: ...`` on stderr and exit status 2 (a diverged run: 3), never
  a traceback: norga's own errors (:class:`~norga.errors.NorgaError`, :class:`~norga.config.ConfigError`),
  out of memory (``MemoryError``, CUDA's ``OutOfMemoryError``, an allocator's ``can't allocate memory``,
  ``ENOMEM``), OS errors (a full or read-only disk, permissions, a name too long, the network) and decode
  errors of files (not UTF-8, invalid JSON or YAML, pickles, damaged archives, checkpoints, safetensors),
  naming the file where it is known (:func:`user_error`);
* Ctrl-C or SIGTERM is one line saying what is saved, exit status 130;
* nothing is left half-created: when a command fails, the folders it created through the write guard
  (:mod:`norga.outputs`) and left empty are removed, and so is what ``on_failure`` discards (``norga train``:
  a run folder it created that holds no completed task, :func:`discard_new_run_folder`); when it succeeds
  they are kept;
* anything else (a TypeError, an AttributeError, ...) is a bug and keeps its traceback.

Imports nothing heavy.
"""
from __future__ import annotations

import errno
import io
import json
import os
import pickle
import re
import select
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

from ..config import ConfigError
from ..errors import DIVERGED_EXIT, NorgaError, TrainingDiverged, one_line
from ..interrupts import sigterm_as_interrupt
from ..outputs import forget_new_folders, undo_new_folders

INTERRUPTED = 130  # the shell's status for a process stopped by SIGINT
STDOUT_CLOSED = 141  # the shell's status for a process stopped by SIGPIPE (its reader closed the pipe)
_DISK = {errno.ENOSPC: "free some space", getattr(errno, "EDQUOT", errno.ENOSPC): "free some space",
         errno.EROFS: "make it writable or choose another folder"}  # OSErrors that are the disk's, not a bug
_NETWORK = "check the network connection (or the server), then run the same command again"
_OS_FIXES = {errno.ENAMETOOLONG: "a name in that path is too long for this file system: choose a shorter one",
             errno.ENOENT: "check the path (relative paths start at the current folder)",
             errno.ENOTDIR: "a part of that path is a file, not a folder: check the path",
             errno.EISDIR: "that is a folder: give a file", errno.EMFILE: "raise the limit (ulimit -n) or lower "
             "data.num_workers", errno.ENFILE: "close other programs or lower data.num_workers",
             errno.EIO: "the disk reported an I/O error: check it, then run the same command again",
             errno.ECONNREFUSED: _NETWORK, errno.ECONNRESET: _NETWORK, errno.ETIMEDOUT: _NETWORK,
             errno.ENETUNREACH: _NETWORK, errno.EHOSTUNREACH: _NETWORK}
_OOM = re.compile(r"(can'?t|cannot|unable to|failed to) allocate|out of memory|ALLOC_FAILED", re.IGNORECASE)
_OOM_FIX = "lower the batch sizes (method.wtp.batch_size, eval_batch_size, method.tii.batch_size) or data.image_size"
_FILE_LOCALS = ("path", "file", "filename", "fp", "f", "source", "checkpoint")  # names a file being read goes by
_ARCHIVE_MODULES = {"zipfile", "tarfile", "zlib", "lzma", "bz2", "gzip"}


# ---- one-line errors --------------------------------------------------------
def user_error(err: BaseException) -> Optional[str]:
    """The one-line message for an error the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(err, (NorgaError, ConfigError)):
        return one_line(str(err))
    for describe in (memory_error, decode_error, os_error):
        message = describe(err)
        if message is not None:
            return message
    return None


def memory_error(err: BaseException) -> Optional[str]:
    """Out of memory, however it is spelled: MemoryError, CUDA's OutOfMemoryError, an allocator's RuntimeError
    ("can't allocate memory"), ENOMEM; a DataLoader worker killed (usually the kernel's out-of-memory killer)."""
    text = one_line(str(err))
    if isinstance(err, RuntimeError) and "DataLoader worker (pid" in text:
        return (f"a data loading worker died ({text[:120]}), usually out of memory or a small /dev/shm; lower "
                f"data.num_workers, or {_OOM_FIX}")
    oom = (isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"
           or (isinstance(err, RuntimeError) and _OOM.search(text) is not None)
           or (isinstance(err, OSError) and err.errno == errno.ENOMEM))
    return f"out of memory ({text[:120] or type(err).__name__}); {_OOM_FIX}" if oom else None


def os_error(err: BaseException) -> Optional[str]:
    """An OSError (disk, permissions, paths, network) as one line naming the path where known and the fix."""
    if not isinstance(err, OSError) or isinstance(err, io.UnsupportedOperation):  # that one: a bug of ours
        return None
    where = short_path(err.filename) if err.filename is not None else ""
    if err.filename2 is not None:
        where += f" -> {short_path(err.filename2)}"
    if err.errno in _DISK:
        return (f"cannot write{' ' + where if where else ''}: {err.strerror}; {_DISK[err.errno]}, then re-run the "
                "same command (files of completed tasks are intact)")
    if isinstance(err, PermissionError):
        return f"permission denied: {where or one_line(str(err))}; check the permissions of that path"
    reason = err.strerror or one_line(str(err)) or type(err).__name__
    network = isinstance(err, (ConnectionError, TimeoutError)) or _module(err) in {
        "urllib", "urllib3", "requests", "http", "socket", "ssl"}
    fix = _OS_FIXES.get(err.errno) or (_NETWORK if network else "check that path and the file system, then run "
                                       "the same command again")
    return f"{where}: {reason}; {fix}" if where else f"{reason} ({type(err).__name__}); {fix}"


def decode_error(err: BaseException) -> Optional[str]:
    """A file that cannot be decoded (text, JSON, YAML, pickle, archive, checkpoint) as one line naming it where
    known; None for anything else."""
    what = _undecodable(err)
    if what is None:
        return None
    name = file_of(err)
    if name:
        return f"cannot read {name}: {what}; fix or replace that file (or give another one)"
    return f"cannot read a file: {what}; fix or replace it (see the paths given to this command)"


def _undecodable(err: BaseException) -> Optional[str]:
    """What is wrong with the file that raised ``err``, or None when ``err`` is no decode error."""
    first = one_line(str(err))[:160]
    if isinstance(err, UnicodeDecodeError):
        return f"not {err.encoding} text ({err.reason} at byte {err.start})"
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    if _module(err) == "yaml":
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"not valid YAML{at} ({getattr(err, 'problem', None) or first})"
    if isinstance(err, (pickle.UnpicklingError, EOFError)):
        return f"cannot be unpickled ({first or type(err).__name__}): damaged, truncated, or not written by norga"
    if _module(err) in _ARCHIVE_MODULES:
        return f"a damaged archive ({first or type(err).__name__})"
    if type(err).__name__ == "SafetensorError":
        return f"not a readable .safetensors file ({first})"
    if isinstance(err, RuntimeError) and "PytorchStreamReader" in first:
        return f"a damaged or truncated torch file ({first})"
    return None


def _module(err: BaseException) -> str:
    """The top-level package that defines ``err``'s class (``yaml``, ``zipfile``, ...)."""
    return type(err).__module__.split(".")[0]


def file_of(err: BaseException) -> Optional[str]:
    """The file being read when ``err`` was raised, where known: a YAML mark's name, else the innermost frame of
    the traceback holding a path or an open file under a usual name (``path``, ``file``, ``f``, ...)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None and getattr(mark, "name", "<").strip()[:1] not in ("<", ""):
        return short_path(mark.name)
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for name in _FILE_LOCALS:
            value = frame.f_locals.get(name)
            if isinstance(value, os.PathLike):
                return short_path(os.fspath(value))
            if isinstance(value, io.IOBase) and isinstance(getattr(value, "name", None), str):
                return short_path(value.name)
    return None


def short_path(name) -> str:
    """``name`` as text, a very long one shortened in the middle (a message stays readable on one line)."""
    text = os.fsdecode(name) if isinstance(name, (bytes, os.PathLike)) else str(name)
    return text if len(text) <= 160 else f"{text[:100]}...{text[-40:]}"


def close_progress_bars() -> None:
    """Close the progress bars still open, so that a message starts on its own terminal line."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


# ---- nothing half-created -------------------------------------------------------------------
def discard_new_run_folder(folder: Path) -> None:
    """Remove the run folder ``folder`` that this command created (the caller checked it did not exist before)
    when it holds no completed task and only what norga writes in a run folder; otherwise leave it. Only the
    main process (torchrun's rank 0) removes anything."""
    folder = Path(folder)
    if os.environ.get("RANK", "0") != "0" or folder.is_symlink() or not folder.is_dir():
        return
    from ..engine.run_marker import LOCK, NORGA_NAMES  # the engine is loaded by then (a folder exists)

    entries = list(folder.iterdir())
    foreign = [p for p in entries if p.name not in NORGA_NAMES and p.name != LOCK and not p.name.endswith(".tmp")]
    if foreign or any((folder / "checkpoints").glob("task_*.pt")):
        return  # the user's files, or completed tasks (a resume continues them): kept
    shutil.rmtree(folder, ignore_errors=True)


class NewRunFolder:
    """The output folder of ``norga train``, remembered before the command runs: :meth:`discard` (the boundary's
    ``on_failure``) removes it only if it did not exist then (:func:`discard_new_run_folder`)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.existed = os.path.lexists(self.folder)  # False for a path that cannot exist (e.g. a name too long)

    def discard(self) -> None:
        if not self.existed:
            discard_new_run_folder(self.folder)


def _clean_up(on_failure: Optional[Callable[[], None]]) -> None:
    """After a failure: ``on_failure``'s cleanup, then the new folders left empty; never raises an OSError."""
    try:
        if on_failure is not None:
            on_failure()
    except (OSError, ImportError):  # the command's own error is the one to report
        pass
    undo_new_folders()


# ---- the boundary ---------------------------------------------------------------------------------
def guarded(action: Callable[[], int], on_interrupt: Callable[[], str],
            on_failure: Optional[Callable[[], None]] = None) -> int:
    """Run ``action`` (a command; returns its exit status) inside the error boundary (module docstring): user
    errors -> one line + exit 2 (a diverged run: 3); Ctrl-C/SIGTERM -> one line + 130; bugs re-raised. On any
    failure the new empty folders go and ``on_failure`` runs (not on Ctrl-C: what was saved is kept)."""
    with sigterm_as_interrupt():  # SIGTERM (a scheduler, `kill`) stops a command as Ctrl-C does
        return _run_guarded(action, on_interrupt, on_failure)


def _run_guarded(action, on_interrupt, on_failure) -> int:
    try:
        status = action()
    except KeyboardInterrupt:
        close_progress_bars()
        undo_new_folders()
        print(f"error: interrupted; {on_interrupt()}", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:  # noqa: BLE001 - filtered by user_error, bugs are re-raised
        _clean_up(None if isinstance(err, TrainingDiverged) else on_failure)  # a diverged run says status: failed
        if isinstance(err, BrokenPipeError) and _stdout_gone():  # `norga list | head`: the reader left
            return STDOUT_CLOSED
        message = user_error(err)
        if message is None:
            raise
        close_progress_bars()
        print(f"error: {message}", file=sys.stderr)
        return DIVERGED_EXIT if isinstance(err, TrainingDiverged) else 2
    if status == 0:
        forget_new_folders()
    else:
        _clean_up(on_failure)
    return status


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (then it is sent to /dev/null, so that the
    interpreter's own flush at exit stays quiet): not an error to report, the shell's 141 is the exit status."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()  # a pipe whose reader closed reports POLLERR to its writer (Linux, macOS)
        poller.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):
            return False
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        return True
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no real stdout: report the error
        return False
