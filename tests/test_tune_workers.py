"""``norga tune`` with real processes on one SQLite study: a worker killed mid-trial loses only that trial (marked
FAIL, never counted), and two concurrent workers share one study."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from test_tune_support import REPO, study_trials, trial_table, write_spec

from norga.commands.cli import main as norga

pytestmark = pytest.mark.integration


def _wait_for_running_trial(out: Path, process: subprocess.Popen, limit: float = 600.0) -> int:
    """The number of the first trial the worker process is running (started and named by its worker), read from its
    SQLite study read-only (an Optuna storage opened here could race the worker creating the tables)."""
    start = time.time()
    while time.time() - start < limit:
        assert process.poll() is None, "the worker ended before a trial was caught running"
        try:
            with closing(sqlite3.connect(f"file:{out / 'study.db'}?mode=ro", uri=True)) as db:
                running = db.execute("SELECT t.number FROM trials t JOIN trial_user_attributes a ON a.trial_id = "
                                     "t.trial_id WHERE t.state = 'RUNNING' AND a.key = 'norga_worker'").fetchall()
        except sqlite3.OperationalError:  # no file or no table yet
            running = []
        if running:
            return running[0][0]
        time.sleep(0.05)
    raise AssertionError("no trial started in time")


def test_a_worker_killed_mid_trial_loses_only_that_trial(tmp_path):
    spec = write_spec(tmp_path, trials=3)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "norga", "tune", str(spec), "--out", str(out), "--no-final"],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        killed = _wait_for_running_trial(out, process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert {t.number: t.state.name for t in study_trials(out)}[killed] == "RUNNING"  # left behind by the dead worker
    assert norga(["tune", str(spec), "--out", str(out), "--no-final"]) == 0  # continues the study
    trials = study_trials(out)
    states = {t.number: t.state.name for t in trials}
    assert states[killed] == "FAIL" and sorted(states) == list(range(len(trials)))  # no number twice
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(finished) == 3 and killed not in {t.number for t in finished}  # replaced, not counted
    for t in finished:
        metrics = json.loads((out / "trials" / f"{t.number:04d}_s0" / "metrics.json").read_text())
        assert metrics["completed_tasks"] == 1 and metrics["FA"] == pytest.approx(t.value)
    assert {r["number"]: r["state"] for r in trial_table(out)}[str(killed)] == "FAIL"


def test_two_concurrent_workers_share_one_study(tmp_path):
    spec = write_spec(tmp_path, trials=4)
    out = tmp_path / "out"
    assert norga(["tune", str(spec), "--out", str(out), "-j", "2", "--launcher", "local", "--no-final"]) == 0
    trials = study_trials(out)
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    assert 4 <= len(finished) <= 5  # the budget; a second worker may finish the trial it had started
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    workers = {t.user_attrs["norga_worker"] for t in finished}
    assert len(workers) == 2 and str(os.getpid()) not in {w.rpartition(":")[2] for w in workers}
    spans = {w: [(t.datetime_start, t.datetime_complete) for t in finished if t.user_attrs["norga_worker"] == w]
             for w in workers}
    first, second = spans.values()
    assert min(e for _, e in first) > min(s for s, _ in second) and min(e for _, e in second) > min(
        s for s, _ in first), "the two workers' trials never overlapped in time"
    assert sorted(p.name for p in (out / "workers").glob("*.log")) == ["worker_0.log", "worker_1.log"]
    assert (out / "best.yaml").is_file() and len(trial_table(out)) == len(trials)


def test_running_trials_of_dead_or_unnamed_workers_are_failed(tmp_path, monkeypatch):
    import optuna

    from norga.tune import study as tune_study
    from norga.tune.trial import WORKER_ATTR, worker_id

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    named_dead, alive, unnamed = study.ask(), study.ask(), study.ask()
    named_dead.set_user_attr(WORKER_ATTR, f"{worker_id().rpartition(':')[0]}:{dead.pid}")
    alive.set_user_attr(WORKER_ATTR, worker_id())  # this process: alive
    assert tune_study.fail_dead_local_trials(study) == [named_dead.number]  # the unnamed one is still young
    monkeypatch.setattr(tune_study, "ORPHAN_SECONDS", -1)
    assert tune_study.fail_dead_local_trials(study) == [unnamed.number]
    assert [t.state.name for t in study.get_trials()] == ["FAIL", "RUNNING", "FAIL"]


def test_the_final_evaluation_through_the_launcher_equals_the_one_in_process(tmp_path):
    """-j 2: the final runs are norga train commands started two at a time; their numbers are the in-process ones,
    read back from their run folders; running it again resumes (finished runs are not trained again)."""
    from norga.tune.folder import claim_folder
    from norga.tune.final import final_command, run_final
    from norga.tune.spec import read_spec

    spec = read_spec(write_spec(tmp_path))
    best = {"method.metric": "euclidean", "data.options.noise": 0.05}
    here, launched = (claim_folder(tmp_path / name, spec, "") for name in ("here", "launched"))
    lines = []
    expected = run_final(here, spec, best, "", log=lambda line: None)
    got = run_final(launched, spec, best, "", log=lines.append, jobs=2, env={"OMP_NUM_THREADS": "1"})
    assert got["arms"] == expected["arms"] and got["arms"]["best"]["FA"]["n"] == 2
    assert (launched / "final.md").read_text() == (here / "final.md").read_text()
    logs = sorted(p.name for p in (launched / "final" / "logs").glob("*.log"))
    assert logs == ["best_s1.log", "best_s2.log", "default_s1.log", "default_s2.log"] and "2 at a time" in lines[0]
    command = final_command(spec, best, 2, launched / "final" / "best_s2")
    assert command[1:4] == ["-m", "norga", "train"] and command[-2:] == ["--set", "seed=2"]
    assert "method.metric=\"euclidean\"" in command  # the values as --set items, as config_for applies them
    stamps = {p: p.stat().st_mtime_ns for p in (launched / "final").rglob("checkpoints/*.pt")}
    assert run_final(launched, spec, best, "", log=lines.append, jobs=2)["arms"] == expected["arms"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # resumed: nothing trained again
