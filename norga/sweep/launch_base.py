"""What every launcher shares (:mod:`norga.sweep.launchers` and :mod:`norga.sweep.submitit_launch` register into
it): the registry :data:`LAUNCHERS`, :class:`Outcome` and :class:`LaunchError`. Torch-free."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..errors import NorgaError
from ..registry import registrar

LAUNCHERS: Dict[str, Callable[..., List["Outcome"]]] = {}
SUBMITIT_LAUNCHERS = ("slurm", "submitit-local")  # registered by norga.sweep.submitit_launch, imported when asked
PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"
register_launcher = registrar(LAUNCHERS, "launcher")


class LaunchError(NorgaError):
    """A launcher cannot be used as asked (unknown name, submitit missing, bad option)."""


@dataclass(frozen=True)
class Outcome:
    """What became of one command: its exit status (None when submitted and not waited for), its log file (or the
    submitit folder of its job) and the scheduler's job id (submitit launchers)."""

    command: tuple
    returncode: Optional[int]
    log: Path
    job_id: Optional[str] = None
