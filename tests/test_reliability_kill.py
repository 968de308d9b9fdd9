"""Kill -9 at every stage boundary of a task, resume: the final metrics equal the uninterrupted run's.

Slow (one killed process per stage, ~20-40 s each on 2 cores): marked ``slow`` and left out
of the default run; run it with ``python -m pytest -m slow``. The fast fault cases are in
tests/test_reliability.py.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from faults import assert_same_metrics, train_args, train_with_fault
from norga.commands.cli import main as norga
from norga.engine.run_folder import RunDir

pytestmark = pytest.mark.slow

# (fault spec, what is interrupted); tasks 0..2, the kills hit task 1 (TII alignment and TAP exist from task 1 on)
STAGES = [
    ("bar:frozen feats:2", "frozen-feature statistics of task 1"),
    ("bar:TII:2", "TII head training of task 1"),
    ("bar:TII align:1", "TII alignment of task 1"),
    ("bar:WTP:2", "WTP (prompt) training of task 1"),
    ("bar:prompted feats:2", "instructed statistics of task 1"),
    ("bar:TAP:1", "TAP of task 1"),
    ("bar:evaluation:2", "evaluation after task 1"),
    ("write:task_01.pt:partial", "checkpoint write of task 1, half written"),
    ("write:task_01.pt:after", "between the checkpoint of task 1 and its checksum"),
    ("write:metrics.json:partial", "first metrics.json write, half written (task 0 checkpointed)"),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    assert norga(["train", *train_args(out)]) == 0
    return out


@pytest.mark.parametrize("spec", [s for s, _ in STAGES], ids=[what for _, what in STAGES])
def test_kill_at_stage_then_resume_gives_the_uninterrupted_metrics(spec, reference, tmp_path):
    out = tmp_path / "run"
    killed = train_with_fault(out, spec)
    assert killed.returncode == -signal.SIGKILL, f"the fault {spec} never fired: {killed.stderr[-2000:]}"
    done_before = RunDir(out).scan().done
    assert norga(["train", *train_args(out)]) == 0
    assert RunDir(out).scan().done == 3 and done_before <= 1
    final = json.loads((out / "metrics.json").read_text())
    assert_same_metrics(final, json.loads((reference / "metrics.json").read_text()))
    assert not list(out.rglob("*.tmp")) and not (out / ".lock").exists()
