"""One run folder, several processes (torchrun): rank 0 owns the folder, the other processes follow it.

Rank 0 takes the folder's lock, scans the checkpoints and checks the config exactly as
one process does (:func:`opened_run`), then tells the others what it found: how many
tasks are done, or the one-line error that stopped it (so every process stops with the
same message instead of waiting). The others see the folder through :class:`FollowerRun`:
they read the verified checkpoints to resume, and every write is rank 0's alone.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterator, Optional, Tuple

import torch.distributed as dist

from ..errors import RunError, one_line
from ..toolkit.distributed import is_main, world_size
from .run_folder import RunDir, RunState
from .lifecycle import open_run


class FollowerRun:
    """A run folder as a process other than rank 0 sees it: reads are the folder's, writes do nothing."""

    def __init__(self, run: RunDir):
        self._run = run
        self.root = run.root

    def __getattr__(self, name: str):  # reads: load_checkpoint, read_config, scan, ...
        return getattr(self._run, name)

    def save_checkpoint(self, task: int, state: dict) -> None:
        """Rank 0 saves it."""

    def write_config(self, resolved: dict, note=None) -> None:
        """Rank 0 writes it."""

    def write_metrics(self, metrics: dict) -> None:
        """Rank 0 writes it."""

    def write_matrix_csv(self, rows) -> None:
        """Rank 0 writes it."""

    def logger(self) -> logging.Logger:
        """A logger that drops everything (rank 0 logs)."""
        log = logging.getLogger("norga.run.follower")
        if not log.handlers:
            log.addHandler(logging.NullHandler())
            log.propagate = False
        return log


@contextlib.contextmanager
def opened_run(run: RunDir, num_tasks: int,
               check: Callable[[RunState], Optional[dict]]) -> Iterator[Tuple[object, RunState, Optional[dict]]]:
    """``(run, state, finished)`` on every process for the block; rank 0 holds the folder's lock throughout.

    ``check(state)`` runs on rank 0 under the lock (config check; the metrics of a finished run
    or None) and may raise; its error is raised on every process.
    """
    if world_size() == 1:
        with open_run(run, num_tasks) as state:
            yield run, state, check(state)
        return
    if not is_main():
        state, finished, error = _from_rank0(None)
        if error is not None:
            raise RunError(f"{error} (reported by rank 0)")
        yield FollowerRun(run), state, finished
        return
    told = False
    try:
        with open_run(run, num_tasks) as state:
            finished = check(state)
            _from_rank0((state, finished, None))
            told = True
            yield run, state, finished
    except Exception as err:
        if not told:

            _from_rank0((None, None, one_line(str(err)) or type(err).__name__))
        raise


def _from_rank0(value):
    """Rank 0's ``value`` on every process (rank 0 passes it, the others pass anything)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
