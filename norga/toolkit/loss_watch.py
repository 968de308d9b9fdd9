"""Epoch losses of the task being trained, kept in memory so the task loop can tell a run that diverged.

The task loop opens :func:`watching` around one task; every epoch a training stage reports
(:meth:`norga.toolkit.training.EpochStats.report`) is noted with :func:`note_epoch`. After the task's
evaluation, :func:`exploded` says whether a stage's epoch-mean loss exploded. Nothing is noted when no
watch is open (unit tests, notebooks). Under torchrun every process notes the same values: the epoch means
of sharded stages are summed over processes before they are reported.

The rule, fixed before it was used (issue #32): a stage's loss *exploded* when one of its epoch means is
not finite or exceeds ``EXPLOSION_FACTOR x ln(C)`` nats, C the task's number of classes. A cross-entropy at
chance is ln(C); a healthy stage starts near it and falls, its regulariser terms are of order 1. A run is
*failed* when a task ends at chance level with its true task id after such a loss (see
:func:`norga.engine.lifecycle.diverged_to_chance`).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Iterator, List, Optional

EXPLOSION_FACTOR = 100.0  # x ln(C): 230 nats for 10 classes, against ln(10) = 2.3 at chance


@dataclass(frozen=True)
class EpochLoss:
    """One epoch of one stage: its mean training loss (nats per sample) and the config key of its lr."""

    stage: str
    epoch: int
    loss: float
    lr_key: Optional[str] = None


_active: Optional[List[EpochLoss]] = None


@contextlib.contextmanager
def watching() -> Iterator[List[EpochLoss]]:
    """Collect the epochs reported inside the block into the yielded list (nested watches are refused)."""
    global _active
    if _active is not None:
        raise RuntimeError("a loss watch is already open")
    _active = []
    try:
        yield _active
    finally:
        _active = None


def note_epoch(stage: str, epoch: int, loss: Optional[float], lr_key: Optional[str] = None) -> None:
    """Record one epoch's mean loss in the open watch (a no-op without one, or without a loss)."""
    if _active is not None and loss is not None:
        _active.append(EpochLoss(str(stage), int(epoch), float(loss), lr_key))


def exploded(epochs: List[EpochLoss], num_classes: int) -> Optional[EpochLoss]:
    """The first epoch whose mean loss is not finite or above ``EXPLOSION_FACTOR * ln(num_classes)``, or None."""
    limit = EXPLOSION_FACTOR * math.log(max(num_classes, 2))
    for record in epochs:
        if not math.isfinite(record.loss) or record.loss > limit:
            return record
    return None
