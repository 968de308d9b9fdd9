"""Kill -9 at every stage boundary of a task, resume: the final metrics equal the uninterrupted run's.

Slow (one killed process per stage): marked ``slow``; the fast loop (``-m "not slow and not integration"``)
leaves it out. The uninterrupted run is conftest's ``tiny_run`` (shared with tests/test_reliability.py); the
kills of the last task start from a copy of its tasks 0-1, so each killed process trains one task.
The fast fault cases are in tests/test_reliability.py.
"""
from __future__ import annotations

import json
import signal

import pytest

from faults import assert_same_metrics, copy_run, train_args, train_with_fault
from norga.commands.cli import main as norga
from norga.engine.run_folder import RunDir

pytestmark = pytest.mark.slow

# (fault spec, what is interrupted, tasks copied from the uninterrupted run). Tasks 0..2: the kills hit task 2 (TII
# alignment and TAP exist from task 1 on) in a process resuming after task 1, where each stage's first loop is task
# 2's; the last kill hits task 0 in a fresh run folder. Every kill leaves the tasks before it intact, no more.
STAGES = [
    ("bar:frozen feats:1", "frozen-feature statistics of task 2", 2),
    ("bar:TII:1", "TII head training of task 2", 2),
    ("bar:TII align:1", "TII alignment of task 2", 2),
    ("bar:WTP:1", "WTP (prompt) training of task 2", 2),
    ("bar:prompted feats:1", "instructed statistics of task 2", 2),
    ("bar:TAP:1", "TAP of task 2", 2),
    ("bar:evaluation:1", "evaluation after task 2", 2),
    ("write:task_02.pt:partial", "checkpoint write of task 2, half written", 2),
    ("write:task_02.pt:after", "between the checkpoint of task 2 and its checksum", 2),
    ("write:metrics.json:partial", "first metrics.json write, half written (task 0 checkpointed)", 0),
]


@pytest.mark.parametrize("spec, copied", [(s, c) for s, _, c in STAGES], ids=[what for _, what, _ in STAGES])
def test_kill_at_stage_then_resume_gives_the_uninterrupted_metrics(spec, copied, tiny_run, tmp_path):
    out = copy_run(tiny_run, tmp_path / "run", copied) if copied else tmp_path / "run"
    killed = train_with_fault(out, spec)
    assert killed.returncode == -signal.SIGKILL, f"the fault {spec} never fired: {killed.stderr[-2000:]}"
    done_before = RunDir(out).scan().done
    assert norga(["train", *train_args(out)]) == 0
    assert RunDir(out).scan().done == 3 and done_before == (copied or 1)  # killed in the task after the copied ones
    final = json.loads((out / "metrics.json").read_text())
    assert_same_metrics(final, json.loads((tiny_run / "metrics.json").read_text()))
    assert not list(out.rglob("*.tmp")) and not (out / ".lock").exists()
