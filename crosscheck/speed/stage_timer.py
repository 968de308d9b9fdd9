"""Wall time per stage of one process: norga's stages through its declared stage hook (:meth:`StageTimer.stage`
given to ``norga.methods.hooks.HOOKS.watching_stages``), the reference's by wrapping the functions that run each
stage (:meth:`StageTimer.patch`). No torch, no norga import: the reference side imports this module under the
reference code's own environment.

:class:`StageTimer` keeps *exclusive* seconds: a timed function called inside another timed function is charged
to its own stage and subtracted from the caller's, so the stages of one process add up to at most its wall time.
Beside wall seconds it keeps this process's CPU seconds (``time.process_time``, user + system) per stage the same
way: on a machine shared with other jobs, CPU seconds of a one-thread process measure its work where wall time
measures the load. ``startup`` is the time from the process start (``t0``, a ``time.time()`` taken by the parent
right before it started the process) to the first timed call. :func:`write` appends the record as one JSON object
to a file.
"""
from __future__ import annotations

import functools
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

# the stages of the speed report, in table order; every timed function is charged to one of them
STAGES = ("startup", "tii", "wtp", "statistics", "tap", "evaluation", "diagnostics", "other")


class StageTimer:
    """Exclusive wall seconds per stage of one process (see the module docstring)."""

    def __init__(self, t0: Optional[float] = None):
        self.t0 = time.time() if t0 is None else t0
        self.seconds: Dict[str, float] = {}
        self.cpu: Dict[str, float] = {}
        self.calls: Dict[str, int] = {}
        self.first_call: Optional[float] = None
        self.first_call_cpu = 0.0  # process CPU seconds before the first timed call (the start-up's)
        self._stack: List[list] = []  # [stage, start, cpu start, wall and cpu seconds of nested timed calls]

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` block under stage ``name`` (exclusive of timed blocks nested in it)."""
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}; one of {STAGES}")
        start, cpu_start = time.time(), time.process_time()
        if self.first_call is None:
            self.first_call, self.first_call_cpu = start, cpu_start
        self._stack.append([name, start, cpu_start, 0.0, 0.0])
        try:
            yield
        finally:
            name, start, cpu_start, nested, nested_cpu = self._stack.pop()
            elapsed, cpu = time.time() - start, time.process_time() - cpu_start
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - nested
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu - nested_cpu
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._stack:
                self._stack[-1][3] += elapsed
                self._stack[-1][4] += cpu

    def wrap(self, function: Callable, stage: Callable[..., str] | str) -> Callable:
        """``function`` timed under ``stage`` (a name, or a callable of the call's arguments giving the name)."""
        if stage not in STAGES and not callable(stage):
            raise ValueError(f"unknown stage {stage!r}; one of {STAGES}")

        @functools.wraps(function)
        def timed(*args, **kwargs):
            with self.stage(stage(*args, **kwargs) if callable(stage) else stage):
                return function(*args, **kwargs)
        return timed

    def patch(self, module, name: str, stage) -> None:
        """Replace ``module.name`` by its timed version (callers that look the name up in ``module`` see it)."""
        setattr(module, name, self.wrap(getattr(module, name), stage))

    def record(self, **extra) -> dict:
        """Wall and CPU seconds per stage, ``startup`` included, the process's wall and CPU time so far, ``extra``."""
        now, cpu_now = time.time(), time.process_time()
        startup = (self.first_call if self.first_call is not None else now) - self.t0
        startup_cpu = self.first_call_cpu if self.first_call is not None else cpu_now
        return {"seconds": {"startup": startup, **self.seconds}, "cpu": {"startup": startup_cpu, **self.cpu},
                "calls": dict(self.calls), "wall": now - self.t0, "process_cpu": cpu_now, **extra}


def write(path: Path, record: dict) -> None:
    """Append ``record`` to ``path`` as one JSON line (a side with two processes writes two lines)."""
    with Path(path).open("a") as f:
        f.write(json.dumps(record) + "\n")
