"""Whole runs under ``torchrun`` (2 CPU processes, gloo) against one process, and a killed process.

Training with 2 processes is not bitwise the single-process run, and is not meant to be:
each process's WTP contrastive regulariser sees its half of the global batch, the random
augmentations are drawn for other samples, and sums are reduced in another order. So the
final metrics are compared within FA_TOLERANCE, while what must not change is checked
exactly or to float rounding: the frozen-feature Gaussian statistics (they depend on no
training), every epoch logged once, and the evaluation of the same checkpoints in one or
two processes (identical accuracy matrices).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from faults import ENV, REPO, train, train_args

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")

# 36 test images per evaluation (6 classes x 6): 0.1 is under 4 images of difference in the final average accuracy
FA_TOLERANCE = 0.1


def torchrun(script: str, *args: str, nproc: int = 2, timeout: float = 600, **popen):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(REPO / script), *args]
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    if popen:
        return subprocess.Popen(command, env=env, cwd=REPO, **popen)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def epoch_lines(run: Path) -> list:
    return [json.loads(line) for line in (run / "epochs.jsonl").read_text().splitlines()]


def uninstructed_stats(run: Path, task: int) -> dict:
    saved = torch.load(run / "checkpoints" / f"task_{task:02d}.pt", weights_only=False)
    return saved["method"]["uninstructed_stats"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(single-process run, 2-process run) of the tiny config, same seed."""
    root = tmp_path_factory.mktemp("dist")
    single = train(root / "single")
    assert single.returncode == 0, single.stderr[-3000:]
    split = torchrun("train.py", *train_args(root / "split"))
    assert split.returncode == 0, split.stderr[-3000:]
    assert split.stdout.count("run complete") == 1  # rank 0 prints, the other process is silent
    return root / "single", root / "split"


def test_two_processes_write_once_and_match_one_process(runs):
    single, split = runs
    assert "2 processes (torchrun), batch sizes are global" in (split / "log.txt").read_text()
    assert [(e["stage"], e["task"], e["epoch"]) for e in epoch_lines(split)] == \
        [(e["stage"], e["task"], e["epoch"]) for e in epoch_lines(single)]  # every epoch once, none missing
    for task in range(3):  # frozen features: the statistics of all samples, each once, as in one process
        ours, reference = uninstructed_stats(split, task), uninstructed_stats(single, task)
        assert sorted(ours) == sorted(reference)
        for c in ours:
            for key in ours[c]:
                torch.testing.assert_close(ours[c][key], reference[c][key], rtol=1e-4, atol=1e-5)
    a, b = (json.loads((run / "metrics.json").read_text()) for run in runs)
    assert abs(a["FA"] - b["FA"]) <= FA_TOLERANCE, (a["FA"], b["FA"])
    assert b["completed_tasks"] == 3 and b["FA"] > 0.5  # it learned (chance is 1/6)


def test_checkpoints_evaluate_identically_in_one_and_two_processes(runs, tmp_path):
    _, split = runs
    one = subprocess.run([sys.executable, str(REPO / "eval.py"), "--run", str(split), "--output",
                          str(tmp_path / "one.json")], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = torchrun("eval.py", "--run-dir", str(split), "--output", str(tmp_path / "two.json"))
    assert two.returncode == 0, two.stderr[-3000:]
    trained = json.loads((split / "metrics.json").read_text())
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    for key in ("acc_matrix", "til_acc_matrix", "tii_acc_matrix", "tii_confusion"):
        assert one[key] == two[key] == trained[key], key  # evaluation during training was sharded too


def _children(pid: int) -> list:
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_killed_process_stops_the_others_and_the_run_resumes(tmp_path):
    out = tmp_path / "run"
    args = train_args(out, "--set", "method.wtp.epochs=8", "--set", "method.tap.epochs=8")
    launcher = torchrun("train.py", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (out / "checkpoints" / "task_00.pt.sha256").exists() and time.time() < deadline:
        time.sleep(0.2)
    assert launcher.poll() is None, "the run ended before it could be killed"
    workers = sorted(_children(launcher.pid))
    assert len(workers) == 2, workers
    os.kill(workers[-1], signal.SIGKILL)  # the process of rank 1 (started second)
    started = time.time()
    _, stderr = launcher.communicate(timeout=120)  # the launcher stops the surviving process: no hang
    assert launcher.returncode != 0 and time.time() - started < 120
    assert "train.py FAILED" in stderr or "ChildFailedError" in stderr, stderr[-3000:]
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers)
    resumed = torchrun("train.py", *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after task" in (out / "log.txt").read_text()
    assert json.loads((out / "metrics.json").read_text())["completed_tasks"] == 3
