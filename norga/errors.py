"""Errors a user can fix. The command line prints each as one line (``error: ...``) and exits 2.

Every user-facing failure of norga is a :class:`NorgaError` (or
:class:`norga.config.ConfigError`, which predates this module): the message
names what is wrong and the fix, on one line. Anything else reaching the
command line is a bug and keeps its traceback.

* :class:`RunError` — the run folder: in use by another process, not a
  folder, unwritable or full, corrupt or unreadable state;
* :class:`TrainingDiverged` — training diverged: a loss became NaN or inf (:class:`NonFiniteLoss`), learned
  tensors are not finite, or a task ended at chance after its loss exploded; the run folder is marked
  ``status: failed`` and the command exits with :data:`DIVERGED_EXIT` (3), not 2;
* ``norga.data.DataError`` and ``norga.models.checkpoints.CheckpointError``
  (data and backbone weights) also derive from :class:`NorgaError`.

This module imports nothing heavy, so the command line can use it before
torch is loaded.
"""
from __future__ import annotations

from typing import Optional



class NorgaError(Exception):
    """A problem with the user's input, data, weights or run folder (message: what and how to fix)."""


class RunError(NorgaError):
    """The run folder cannot be used as asked (lock, layout, integrity, disk)."""


DIVERGED_EXIT = 3  # exit status of a run stopped because training diverged (the folder says status: failed)


class TrainingDiverged(NorgaError):
    """Training diverged in a task; that task was not saved, earlier ones are kept (``task``: its index)."""

    task: Optional[int] = None


class NonFiniteLoss(TrainingDiverged, FloatingPointError):
    """A training loss became NaN or inf; the message names stage, task, epoch and the key to change."""

    def __init__(self, value: float, stage: Optional[str] = None, epoch: Optional[int] = None,
                 task: Optional[int] = None, lr_key: Optional[str] = None):
        super().__init__(value)
        self.value, self.stage, self.epoch, self.task, self.lr_key = value, stage, epoch, task, lr_key

    def __str__(self) -> str:
        where = ", ".join(part for part in (
            f"stage {self.stage}" if self.stage else "",
            f"task {self.task}" if self.task is not None else "",
            f"epoch {self.epoch}" if self.epoch is not None else "") if part)
        key = self.lr_key or "the method's learning rates (method.*.lr)"
        return (f"training diverged: the loss became {self.value} ({where or 'unknown stage'}); lower {key} "
                "(completed tasks are kept; continuing them with a changed config needs --force)")


def one_line(text: str) -> str:
    """A message on one line; an exception re-raised by a DataLoader worker keeps only its original message."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Caught ") and "Original Traceback" in str(text):
        last = lines[-1]
        return last.split(": ", 1)[1] if ": " in last else last
    return " ".join(" ".join(lines).split())
