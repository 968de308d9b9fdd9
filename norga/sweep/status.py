"""What each run of a sweep is, read from its run folder (and, for a command that failed before it saved anything,
its exit record): ``done``, ``partial`` (k of T tasks saved: a run resumes there), ``failed`` or ``missing``.

    state = run_state(Path("runs/sweep/a=1/seed0"), total=3, record=read_exit_record(...))
    state.kind, state.done, state.total, state.text()     # 'partial', 1, 3, 'partial: 1 of 3 tasks'
    print("\\n".join(table(rows)))                          # the status table of a sweep

There is no database: ``metrics.json`` (``status``, ``completed_tasks``, ``num_tasks``) says what was trained, but
never more than the checkpoints with their checksum files (``checkpoints/task_XX.pt`` and ``.sha256``, the truth)
show: a ``metrics.json`` that counts a task whose checkpoint is gone makes the run ``partial``, so the sweep
resubmits it and ``norga train`` verifies it against its checkpoints. Without ``metrics.json`` the checkpoints are
counted. A run is ``failed`` when its ``metrics.json`` says so (training diverged) or when the last command on it
exited with an error (not a stop: Ctrl-C, SIGTERM, a time limit); a sweep resubmits failed runs only with
``--retry-failed``.
Torch-free.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .records import failure

KINDS = ("done", "partial", "failed", "missing")
_TASK_SUM = re.compile(r"task_(\d+)\.pt\.sha256$")


@dataclass(frozen=True)
class RunState:
    """``kind`` (one of :data:`KINDS`), ``done`` (tasks saved), ``total`` (tasks of the run; None when unknown),
    ``reason`` (why it failed)."""

    kind: str
    done: int = 0
    total: Optional[int] = None
    reason: str = ""

    def text(self) -> str:
        """``done``, ``partial: 1 of 3 tasks``, ``failed (1 of 3 tasks): exit 2: error: ...``, ``missing``."""
        tasks = f"{self.done} of {self.total if self.total is not None else '?'} tasks"
        if self.kind == "partial":
            return f"partial: {tasks}"
        if self.kind == "failed":
            return f"failed ({tasks})" + (f": {self.reason}" if self.reason else "")
        return self.kind


def read_metrics(folder: Path) -> Optional[dict]:
    """``folder/metrics.json`` as a dict, or None when absent or unreadable."""
    try:
        data = json.loads((Path(folder) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def saved_tasks(folder: Path) -> int:
    """How many tasks have a checkpoint with its checksum file, counted from task 0 without a gap."""
    try:
        found = {int(m.group(1)) for p in (Path(folder) / "checkpoints").iterdir()
                 if (m := _TASK_SUM.match(p.name))}
    except OSError:
        return 0
    done = 0
    while done in found:
        done += 1
    return done


def run_state(folder: Path, total: Optional[int] = None, record: Optional[dict] = None) -> RunState:
    """The state of the run folder ``folder`` (``total``: its number of tasks when known; ``record``: the exit
    record of the last command on it); see the module docstring."""
    folder = Path(folder)
    metrics = read_metrics(folder)
    if metrics is not None:
        total = metrics.get("num_tasks") or total
        done = min(int(metrics.get("completed_tasks") or 0), saved_tasks(folder))  # a count without its checkpoint
        if metrics.get("status") == "failed":
            stopped = metrics.get("stopped") or {}
            return RunState("failed", done, total, " ".join(str(stopped.get("reason", "")).split())[:300])
        if total and done == total and metrics.get("status") in (None, "complete"):
            return RunState("done", done, total)
        state = RunState("partial", done, total)
    elif folder.is_dir() and any(folder.iterdir()):
        state = RunState("partial", saved_tasks(folder), total)
    else:
        state = RunState("missing", 0, total)
    why = failure(record)
    return RunState("failed", state.done, state.total, why) if why else state


def counts(states: Sequence[RunState]) -> str:
    """``4 runs: 2 done, 1 partial, 0 failed, 1 missing``."""
    n = {kind: sum(s.kind == kind for s in states) for kind in KINDS}
    return f"{len(states)} runs: " + ", ".join(f"{n[k]} {k}" for k in KINDS)


def table(rows: Sequence[Tuple[str, int, RunState]]) -> List[str]:
    """The status table: one line per (point, seed, state), then the counts."""
    width = max([len("point")] + [len(name) for name, _, _ in rows])
    lines = [f"{'point':<{width}}  {'seed':>4}  status"]
    lines += [f"{name:<{width}}  {seed:>4}  {state.text()}" for name, seed, state in rows]
    return lines + [counts([state for _, _, state in rows])]
