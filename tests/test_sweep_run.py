"""norga sweep end to end (issue #69): a grid of tiny smoke runs through ``--launcher local`` and through submitit's
``LocalExecutor`` (real subprocesses, the submission path SLURM uses) gives the run folders and summary of
sequential ``norga train`` runs; a job stopped with SIGUSR1 (a time limit) or SIGTERM (preemption) in the middle of
a task is requeued by submitit, resumes its run folder and ends with the uninterrupted run's metrics.
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
import yaml

from faults import assert_same_metrics
from norga.commands.cli import main as norga
from norga.sweep.points import expand
from norga.sweep.spec import load_spec

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
# the smoke config at 2 tasks of 2 classes; task 1 lasts about half a second, so a signal sent when task 0 is saved
# arrives while task 1 trains
TINY = ["data.num_tasks=2", "data.classes_per_task=2",
        "data.options={num_classes: 4, train_per_class: 20, test_per_class: 6}", "method.tii.epochs=1",
        "method.tii.align_epochs=1", "method.tii.samples_per_class=8", "method.wtp.epochs=3", "method.tap.epochs=1",
        "method.tap.samples_per_class=8", "method.diagnostics=false"]
GRID = {"method.gate.activation": ["tanh", "sigmoid"]}


def spec_file(tmp: Path, grid=GRID) -> Path:
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump({"config": str(REPO / "configs" / "smoke.yaml"), "set": TINY, "grid": grid,
                                    "seeds": [0]}, sort_keys=False))
    return path


def sweep(*args: str, **popen):
    command = [sys.executable, "-m", "norga", "sweep", *args]
    if popen:
        return subprocess.Popen(command, env=ENV, cwd=REPO, **popen)
    return subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)


def metrics(folder: Path) -> dict:
    """metrics.json without the checkout's commit (a commit made while the tests run is no difference of the runs)."""
    data = json.loads((folder / "metrics.json").read_text())
    for key in ("git_commit", "git_dirty"):
        data.get("norga", {}).pop(key, None)
    return data


def files(folder: Path) -> list:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.name != ".lock")


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """The grid's runs trained one after the other by ``norga train`` (the reference)."""
    tmp = tmp_path_factory.mktemp("sequential")
    spec = load_spec(spec_file(tmp))
    for point in expand(spec, tmp / "runs"):
        assert norga(["train", *point.train_args()]) == 0
    return spec, tmp / "runs"


@pytest.mark.parametrize("launcher", ["local", "submitit-local"])
def test_a_sweep_gives_the_run_folders_and_summary_of_sequential_train_runs(launcher, sequential, tmp_path, capsys):
    spec, reference = sequential
    root = tmp_path / "root"
    done = sweep(str(spec.path), "--out", str(root), "--launcher", launcher, "-j", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "2 runs: 2 done, 0 partial, 0 failed, 0 missing"
    for point in expand(spec, root):
        ref = reference / point.name / "seed0"
        assert files(point.folder) == files(ref)
        assert_same_metrics(metrics(point.folder), metrics(ref))
    ours = in_process(capsys, "summarize", str(root))  # one group per point of the sweep root
    rows = [line.split("|")[3:] for line in ours.splitlines() if line.startswith("| method.gate")]
    alone = [in_process(capsys, "summarize", str(p.folder)) for p in expand(spec, reference)]  # each run alone
    assert len(rows) == 2 and rows == [[line for line in text.splitlines() if line.startswith("| method.gate")][0]
                                       .split("|")[3:] for text in alone]
    again = sweep(str(spec.path), "--out", str(root), "--launcher", launcher)  # nothing left to run
    assert again.returncode == 0 and again.stdout.count("done, skipped") == 2, again.stdout


def in_process(capsys, *argv: str) -> str:
    """``norga ARGV`` in this process (no start-up cost); its stdout."""
    capsys.readouterr()
    code = norga(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def job_pid_of(run: Path) -> int:
    """The pid of the submitit job process whose ``norga train`` holds the run folder's lock (its parent)."""
    child = int((run / ".lock").read_text().split()[0])
    return int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["SIGUSR1", "SIGTERM"])
def test_a_job_stopped_mid_task_is_requeued_and_ends_as_the_uninterrupted_run(signum, sequential, tmp_path):
    spec, reference = sequential
    one = load_spec(spec_file(tmp_path, {"method.gate.activation": ["tanh"]}))
    [point] = expand(one, tmp_path / "root")
    proc = sweep(str(one.path), "--out", str(tmp_path / "root"), "--launcher", "submitit-local",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    saved, deadline = point.folder / "checkpoints" / "task_00.pt.sha256", time.time() + 300
    while not saved.is_file() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(job_pid_of(point.folder), signum)  # as SLURM before a time limit (SIGUSR1) or when preempting (SIGTERM)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert out.splitlines()[-1] == "1 runs: 1 done, 0 partial, 0 failed, 0 missing"
    log = (tmp_path / "root" / "logs" / point.label / "train.log").read_text()
    assert "error: interrupted; 1 completed task(s) are saved" in log  # stopped in task 1, task 0 kept
    assert "resuming after task 0" in log  # the requeued job resumed the folder
    job_logs = "".join(p.read_text() for p in (tmp_path / "root" / "logs" / "submitit").glob("*_log.*"))
    assert f"Caught signal {signal.Signals(signum).name}" in job_logs and "Requeued job" in job_logs
    assert_same_metrics(metrics(point.folder), metrics(reference / point.name / "seed0"))


def test_reproduce_runs_its_manifest_as_a_sweep(sequential, tmp_path, capsys):
    """``norga reproduce --launcher local``: the manifest's runs are sweep points (``norga sweep status`` reads them)
    and end as ``norga train`` ends them."""
    spec, reference = sequential
    [tanh] = [p for p in expand(spec, reference) if p.name.endswith("=tanh")]
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"paper": "test", "seeds": [0], "cells": [
        {"id": "tiny-tanh", "table": 1, "benchmark": "synthetic", "backbone": "tiny", "method": "norga",
         "config": str(REPO / "configs" / "smoke.yaml"), "overrides": [*TINY, "method.gate.activation=tanh"],
         "expected": {"FA": [0.0, 100.0]}, "source": "tiny grid"}]}, sort_keys=False))
    out = tmp_path / "repro"
    done = subprocess.run([sys.executable, "-m", "norga", "reproduce", "--manifest", str(manifest), "--out", str(out),
                           "--launcher", "local"], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "reproduce.json").read_text())["cells"][0]["complete_seeds"] == [0]
    status = in_process(capsys, "sweep", "status", str(out))
    assert status.splitlines()[-2:] == ["tiny-tanh     0  done", "1 runs: 1 done, 0 partial, 0 failed, 0 missing"]
    assert_same_metrics(metrics(out / "tiny-tanh" / "seed0"), metrics(tanh.folder))
