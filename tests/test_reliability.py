"""Fault injection, fast cases: every failure is one line (exit 2), nothing finished is lost, bad state is detected.

Tiny runs (configs/smoke.yaml shrunk, tests/faults.py). The slow kill-at-every-stage
matrix is tests/test_reliability_kill.py (``pytest -m slow``).
"""
from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults import (ENV, REPO, assert_one_line_error, assert_same_metrics, comparable, copy_run, train_args,
                    train_with_fault)
from norga.commands.cli import main as norga
from norga.errors import DIVERGED_EXIT

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")


@pytest.fixture
def reference(tiny_run) -> Path:
    """An uninterrupted tiny run, the yardstick for every resumed run (conftest's ``tiny_run``, trained in this
    process: killed runs are resumed here too, so 'identical' also covers training split across processes)."""
    return tiny_run


def metrics_of(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def cli(capsys, *argv: str):
    """``norga ...`` in this process: (exit status, stdout, stderr)."""
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- state lost or corrupted --------------------------------------------------------------
def test_finished_run_answers_at_once_and_rebuilds_lost_metrics(reference, tmp_path, capsys, monkeypatch):
    run = copy_run(reference, tmp_path / "run", 3)
    import norga.engine.task_loop as runner

    monkeypatch.setattr(runner, "build_vit", lambda cfg: pytest.fail("a finished run rebuilt the model"))
    status, out, _ = cli(capsys, "train", *train_args(run))
    assert status == 0 and out.startswith("run complete: FA ") and "(3 of 3 tasks)" in out
    monkeypatch.undo()
    (run / "metrics.json").unlink()
    (run / "acc_matrix.csv").unlink()
    status, out, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    assert "rebuilt from the checkpoints" in (run / "log.txt").read_text()
    rebuilt, original = metrics_of(run), metrics_of(reference)
    assert comparable(rebuilt) == comparable(original)
    assert rebuilt["task_seconds"] == original["task_seconds"]  # times come from the checkpoints too
    assert (run / "acc_matrix.csv").read_text() == (reference / "acc_matrix.csv").read_text()


def test_metrics_lost_mid_run_resumes_and_completes(reference, tmp_path, capsys):
    run = copy_run(reference, tmp_path / "run", 2)
    (run / "metrics.json").unlink()
    status, _, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    assert_same_metrics(metrics_of(run), metrics_of(reference))


def test_lost_config_is_recovered_from_the_checkpoints(reference, tmp_path, capsys):
    run = copy_run(reference, tmp_path / "run", 3)
    (run / "config.yaml").unlink()
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.epochs=5"))
    assert_one_line_error(status, err, "already trained with another config (changed: ['method.wtp.epochs'])",
                          "nothing was retrained")
    assert not (run / "config.yaml").exists()
    status, out, err = cli(capsys, "train", *train_args(run))
    assert status == 0 and out.startswith("run complete"), err[-2000:]
    assert (run / "config.yaml").read_text() == (reference / "config.yaml").read_text()



def test_a_run_written_before_a_config_key_existed_continues_only_at_its_default(reference, tmp_path, capsys):
    import yaml

    run = copy_run(reference, tmp_path / "run", 2)
    stored = yaml.safe_load((run / "config.yaml").read_text())
    assert stored.pop("amp") == "off"  # as a run of a norga without the key would have stored it
    (run / "config.yaml").write_text(yaml.safe_dump(stored))
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "amp=bf16"))
    assert_one_line_error(status, err, "different config (changed: ['amp'])")
    status, _, err = cli(capsys, "train", *train_args(run))  # trains the third task on the default
    assert status == 0, err[-2000:]
    assert_same_metrics(metrics_of(run), metrics_of(reference))


def test_truncated_checkpoint_is_named_and_training_redoes_that_task(reference, tmp_path, capsys):
    run = copy_run(reference, tmp_path / "run", 3)
    last = run / "checkpoints" / "task_02.pt"
    last.write_bytes(last.read_bytes()[:5000])
    status, _, err = cli(capsys, "eval", "--run", str(run))
    assert_one_line_error(status, err, "checkpoints/task_02.pt (task 2) is corrupt", "trains that task again")
    assert not (run / "eval.json").exists()
    status, _, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    assert "task_02.pt (task 2) is corrupt" in (run / "log.txt").read_text()
    assert "resuming after task 1: tasks 0-1 done (2 of 3), next task 2" in (run / "log.txt").read_text()
    assert metrics_of(run)["completed_tasks"] == 3 and metrics_of(run)["acc_matrix"][0][:2] == \
        metrics_of(reference)["acc_matrix"][0][:2]


def test_checkpoints_never_execute_code_on_load(reference, tmp_path, capsys):
    """A checkpoint with a pickled callable (whose checksum matches) is refused, not run."""
    import torch
    from norga.engine.run_folder import RunDir

    run = copy_run(reference, tmp_path / "run", 1)
    state = RunDir(run).load_checkpoint(0)
    state["payload"] = Path  # a global outside torch's weights_only allow-list
    RunDir(run).save_checkpoint(0, state)
    with pytest.raises(Exception, match="cannot be loaded safely"):
        RunDir(run).load_checkpoint(0)
    assert torch.load(RunDir(run).checkpoint_path(0), weights_only=False)["payload"] is Path


def test_checkpoints_of_an_older_norga_are_refused_not_overwritten(reference, tmp_path, capsys):
    run = copy_run(reference, tmp_path / "run", 2)
    for sidecar in (run / "checkpoints").glob("*.sha256"):
        sidecar.unlink()
    before = (run / "checkpoints" / "task_00.pt").read_bytes()
    status, _, err = cli(capsys, "train", *train_args(run))
    assert_one_line_error(status, err, "older norga version", "new --output-dir")
    assert (run / "checkpoints" / "task_00.pt").read_bytes() == before


# ---- kills and Ctrl-C -------------------------------------------------------------------------
def test_kill_between_checkpoint_and_checksum_then_resume_is_identical(reference, tmp_path):
    out = copy_run(reference, tmp_path / "run", 2)  # tasks 0-1 done: the killed process trains task 2 only
    killed = train_with_fault(out, "write:task_02.pt:after")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / "checkpoints" / "task_02.pt").is_file() and not (out / "checkpoints" / "task_02.pt.sha256").exists()
    assert metrics_of(out)["completed_tasks"] == 2  # metrics never describe an unverified task
    assert norga(["train", *train_args(out)]) == 0
    assert "has no checksum file: its write was interrupted" in (out / "log.txt").read_text()
    assert_same_metrics(metrics_of(out), metrics_of(reference))


def test_ctrl_c_stops_with_one_line_and_resumes_identically(reference, tmp_path):
    out = copy_run(reference, tmp_path / "run", 1)  # task 0 done: the interrupted process trains task 1
    stopped_run = train_with_fault(out, "write:task_01.pt.sha256:sigint")  # Ctrl-C right after task 1 is saved
    assert_one_line_error(stopped_run.returncode, stopped_run.stderr, "interrupted;",
                          "run the same command again to resume", status=130)
    assert not (out / ".lock").exists()
    done = rundir_done(out)
    assert done == 2
    assert f"interrupted (Ctrl-C or SIGTERM) during task {done}" in (out / "log.txt").read_text()
    stopped = metrics_of(out)  # written at the interrupt: the saved tasks only, marked interrupted
    assert stopped["status"] == "interrupted" and stopped["completed_tasks"] == done == stopped["stopped"]["task"]
    assert norga(["train", *train_args(out)]) == 0
    assert_same_metrics(metrics_of(out), metrics_of(reference))


def test_second_process_on_a_folder_is_refused_and_a_killed_owner_leaves_no_stale_lock(tmp_path, capsys):
    out = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "train.py"), *train_args(out, "--set", "method.wtp.epochs=50")]
    owner = subprocess.Popen(cmd, env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (out / ".lock").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        status, _, err = cli(capsys, "train", *train_args(out, "--set", "method.wtp.epochs=50"))
        assert_one_line_error(status, err, "is in use by another norga process", f"pid {owner.pid}")
    finally:
        owner.kill()
        owner.wait()
    assert (out / ".lock").exists()  # left behind by the killed owner, but not holding anyone off
    status, out_text, err = cli(capsys, "train", *train_args(out))
    assert status == 0, err[-2000:]
    assert not (out / ".lock").exists()


# ---- numerics, disk ---------------------------------------------------------------------------
def test_non_finite_loss_names_stage_task_epoch_and_key(tmp_path, capsys):
    out = tmp_path / "run"
    status, _, err = cli(capsys, "train", *train_args(out, "--set", "method.tii.lr=1e30"))
    assert_one_line_error(status, err, "training diverged", "task 0", "epoch", "lower method.tii.lr",
                          status=DIVERGED_EXIT)
    failed = metrics_of(out)  # the folder says what it is: failed in task 0, no result
    assert failed["status"] == "failed" and failed["completed_tasks"] == 0 and "FA" not in failed
    assert not list((out / "checkpoints").glob("*.pt"))


def test_divergence_in_a_later_task_keeps_earlier_results_without_nan(tmp_path, capsys):
    out = tmp_path / "run"
    # alignment: tasks >= 1
    status, _, err = cli(capsys, "train", *train_args(out, "--set", "method.tii.align_lr=1e37"))
    assert_one_line_error(status, err, "training diverged", "stage tii_align, task 1", "lower method.tii.align_lr",
                          status=DIVERGED_EXIT)
    text = (out / "metrics.json").read_text()
    metrics = json.loads(text)
    assert metrics["completed_tasks"] == 1 and "NaN" not in text and "Infinity" not in text
    assert metrics["status"] == "failed" and metrics["stopped"]["task"] == 1
    assert "stage tii_align, task 1" in metrics["stopped"]["reason"]
    assert "run failed in task 1" in (out / "log.txt").read_text()
    assert not (out / "checkpoints" / "task_01.pt").exists()


def test_disk_full_while_checkpointing_keeps_earlier_files(reference, tmp_path, capsys, monkeypatch):
    from norga import files
    from norga.engine.run_folder import RunDir

    write = files._write

    def full(f, data, path):
        if Path(path).name == "task_01.pt":
            raise OSError(errno.ENOSPC, "No space left on device")
        write(f, data, path)

    monkeypatch.setattr(files, "_write", full)
    out = copy_run(reference, tmp_path / "run", 1)
    status, _, err = cli(capsys, "train", *train_args(out))
    assert_one_line_error(status, err, f"cannot write {out / 'checkpoints' / 'task_01.pt'}: No space left",
                          "free some space", "re-run the same command")
    assert RunDir(out).scan().done == 1 and metrics_of(out)["completed_tasks"] == 1
    assert not list(out.rglob("*.tmp")) and not (out / "checkpoints" / "task_01.pt").exists()
    monkeypatch.undo()
    status, _, err = cli(capsys, "train", *train_args(out))
    assert status == 0 and metrics_of(out)["completed_tasks"] == 3, err[-2000:]


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MB tmpfs (needs root and mount permission; skipped otherwise)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_real_full_and_read_only_disk(reference, tmpfs, capsys):
    run = copy_run(reference, tmpfs / "run", 1)
    (run / "metrics.json").unlink()
    # fill the disk, then leave 60 kB: small files fit, a checkpoint not. Unbuffered, so the failing write
    # leaves no bytes in a buffer that closing the file would try (and fail) to flush
    with open(tmpfs / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    (tmpfs / "filler").write_bytes(b"\0" * max(0, (tmpfs / "filler").stat().st_size - 60_000))
    status, _, err = cli(capsys, "train", *train_args(run))
    assert_one_line_error(status, err, "No space left on device", "free some space")
    assert rundir_done(run) == 1
    close_run_logs(run)  # the in-process run keeps log.txt open; a busy mount cannot be made read-only
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    status, _, err = cli(capsys, "train", *train_args(run))
    assert_one_line_error(status, err, "Read-only file system", "make the folder writable")
    assert rundir_done(run) == 1


def close_run_logs(run: Path) -> None:
    import logging

    log = logging.getLogger(f"norga.run.{run.resolve()}")
    for handler in list(log.handlers):
        handler.close()
        log.removeHandler(handler)


def rundir_done(run: Path) -> int:
    from norga.engine.run_folder import RunDir

    return RunDir(run).scan().done


def test_metric_comparison_is_exact_except_for_the_methods_float_diagnostics():
    from faults import DIAGNOSTIC_RTOL, metric_differences

    want = {"FA": 0.5, "acc_matrix": [[1.0, None]], "task_seconds": [3.0], "seed": 0,
            "method": {"prompt_norms": [20.0], "gate": {"name": "norga", "alpha": [1.0]}}}
    close = {**want, "task_seconds": [9.0], "method": {"prompt_norms": [20.0 * (1 + DIAGNOSTIC_RTOL / 10)],
                                                        "gate": {"name": "norga", "alpha": [1.0]}}}
    assert metric_differences(close, want) == []  # wall clock ignored, diagnostics within the tolerance
    far = {**want, "method": {"prompt_norms": [20.0 * (1 + DIAGNOSTIC_RTOL * 10)], "gate": want["method"]["gate"]}}
    assert [d.split(":")[0] for d in metric_differences(far, want)] == ["method.prompt_norms[0]"]
    accuracy = {**want, "FA": 0.5 + 1e-12, "acc_matrix": [[1.0, 0.0]]}
    assert [d.split(":")[0] for d in metric_differences(accuracy, want)] == ["FA", "acc_matrix[0][1]"]
    renamed = {**want, "method": {**want["method"], "gate": {"name": "linear", "alpha": [1.0]}}}
    assert metric_differences(renamed, want) == ["method.gate.name: 'linear' != 'norga'"]
    assert metric_differences({k: v for k, v in want.items() if k != "seed"}, want) == ["seed: '<missing>' != 0"]
