"""norga sweep without training (issue #69): the sweep file's mistakes, the points' names, the status of run folders
(done / partial / failed / missing), which points a sweep launches, the local launcher's concurrency and GPUs, a
missing submitit, and the SLURM submission (sbatch script and job array) written through submitit with a stub
``sbatch`` on PATH. Whole sweeps that train: tests/test_sweep_run.py."""
from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from norga.commands.cli import main as norga
from norga.sweep.launchers import launch
from norga.sweep.points import command_line, expand, point_name
from norga.sweep.records import write_exit_record
from norga.sweep.root import record_path, root_rows, write_root
from norga.sweep.run import pending
from norga.sweep.spec import load_spec
from norga.sweep.status import RunState

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "configs" / "sweeps" / "smoke_grid.yaml"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def write_spec(tmp: Path, **fields) -> Path:
    raw = {"config": str(REPO / "configs" / "smoke.yaml"), "grid": {"method.wtp.epochs": [1, 2]}, "seeds": [0, 1]}
    raw.update(fields)
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in raw.items() if v is not None}, sort_keys=False))
    return path


def one_error(capsys, argv) -> str:
    code = norga(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


@pytest.mark.parametrize("fields, message", [
    ({"seed": [1]}, "unknown key(s) ['seed']; a sweep file takes config, out, set, grid, seeds"),
    ({"grid": {}}, "grid: is empty; give at least one config key with a list of values"),
    ({"grid": {"method.wtp.epochs": 3}}, "grid: method.wtp.epochs: expected a non-empty list of values"),
    ({"grid": {"method.wtp.epoch": [1, 2]}}, "unknown key(s) ['method.wtp.epoch'] at method.wtp"),
    ({"config": "no_such_config"}, "config: config file not found: no_such_config"),
    ({"seeds": [0, 0]}, "seeds: expected a list of distinct integers"),
])
def test_a_bad_sweep_file_is_one_line_before_anything_is_written(tmp_path, capsys, fields, message):
    spec = write_spec(tmp_path, **fields)
    line = one_error(capsys, ["sweep", str(spec), "--out", str(tmp_path / "root"), "--dry-run", "--no-estimate"])
    assert message in line, line
    assert not (tmp_path / "root").exists()


def test_points_have_stable_names_and_the_overrides_of_norga_train(tmp_path):
    spec = load_spec(write_spec(tmp_path, set=["data.num_tasks=2"],
                                grid={"method.wtp.epochs": [1, 2], "method.gate": [{"name": "norga"}]}))
    points = expand(spec, tmp_path / "root", ["device=cpu"])
    name = points[0].name  # '{', ':' and ' ' cannot stay in a folder name: replaced, and a hash appended
    assert re.fullmatch(r"method\.wtp\.epochs=1,method\.gate=-name--norga--[0-9a-f]{10}", name), name
    assert [p.label for p in points[:2]] == [f"{name}/seed0", f"{name}/seed1"]
    assert len({p.name for p in points}) == 2 and len(points) == 4
    assert points == expand(spec, tmp_path / "root", ["device=cpu"])  # the same overrides: the same folders
    assert points[1].overrides == ("data.num_tasks=2", "method.wtp.epochs=1", "method.gate={name: norga}", "seed=1",
                                   "device=cpu")
    assert points[1].folder == tmp_path / "root" / points[1].name / "seed1"
    assert point_name({"a.b": "1", "c": "x"}) == "a.b=1,c=x"
    assert point_name({"a": "x/y"}) != point_name({"a": "x-y"})  # unsafe characters: a hash keeps them apart
    assert len(point_name({"k": "v" * 300})) <= 100
    line = command_line(points[0], nproc=2, nodes=2)
    assert line[1:6] == ["-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d"]
    assert line[line.index("train") + 1] == "--config" and str(points[0].folder) in line
    assert command_line(points[0]) == [sys.executable, "-m", "norga", "train", *points[0].train_args()]


def test_the_shipped_sweep_file_loads_with_every_point(tmp_path):
    spec = load_spec(SHIPPED)
    assert load_spec(Path("sweeps/smoke_grid")).path.resolve() == SHIPPED.resolve()  # by its shipped name too
    points = expand(spec, spec.out)
    assert [p.load().method.gate["activation"] for p in points] == ["tanh", "sigmoid"]
    assert [p.load().data.num_tasks for p in points] == [2, 2]


def put_metrics(folder: Path, done: int, total: int = 3, status: str = "incomplete", **extra) -> None:
    """A run folder whose metrics.json counts ``done`` tasks, each with its checkpoint and checksum file (the
    status counts no task without them)."""
    (folder / "checkpoints").mkdir(parents=True)
    for task in range(done):
        for name in (f"task_{task:02d}.pt", f"task_{task:02d}.pt.sha256"):
            (folder / "checkpoints" / name).write_text("x")
    (folder / "metrics.json").write_text(json.dumps({"num_tasks": total, "completed_tasks": done, "status": status,
                                                     **extra}))


def test_status_reads_done_partial_failed_and_missing_from_the_run_folders(tmp_path, capsys):
    spec = load_spec(write_spec(tmp_path, grid={"method.wtp.epochs": [1, 2, 3, 4]}, seeds=[0]))
    root = tmp_path / "root"
    points = expand(spec, root)
    write_root(root, points, [3] * 4, spec.path)
    done, partial, diverged = points[0].folder, points[1].folder, points[2].folder  # points[3]: no folder
    put_metrics(done, 3, status="complete")
    (partial / "checkpoints").mkdir(parents=True)  # no metrics.json: the verified checkpoints are counted
    for name in ("task_00.pt", "task_00.pt.sha256", "task_01.pt"):  # task 1's checksum not written: not saved
        (partial / "checkpoints" / name).write_text("x")
    put_metrics(diverged, 1, status="failed", stopped={"task": 1, "reason": "training diverged in task 1"})
    log = tmp_path / "train.log"
    log.write_text("...\nerror: data.root: /nope does not exist\n")
    write_exit_record(record_path(root, points[3].label), 2, log)  # failed before it saved anything
    states = [state for _, _, state in root_rows(root)]
    assert [s.text() for s in states] == [
        "done", "partial: 1 of 3 tasks", "failed (1 of 3 tasks): training diverged in task 1",
        "failed (0 of 3 tasks): exit 2: error: data.root: /nope does not exist"]
    write_exit_record(record_path(root, points[3].label), 130, log)  # stopped (Ctrl-C, preempted): not failed
    assert root_rows(root)[3][2] == RunState("missing", 0, 3)
    assert norga(["sweep", "status", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["point", "seed", "status"] and out[-1] == "4 runs: 1 done, 1 partial, 1 failed, 1 missing"
    assert out[2].endswith("  partial: 1 of 3 tasks") and out[1].endswith("  done"), out
    assert norga(["sweep", "status", str(spec.path), "--out", str(root)]) == 0  # the sweep file names the root too
    assert capsys.readouterr().out.splitlines()[-1] == out[-1]
    assert norga(["sweep", str(spec.path), "--out", str(root), "--dry-run", "--no-estimate"]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert dry[2] == f"{points[1].label}: partial: 1 of 3 tasks; est. ?, peak memory ?"  # the status as status has it
    assert dry[3].strip() == f"$ {points[1].shell()}" and dry[3].strip().startswith("$ norga train --config ")
    assert dry[-1] == "4 runs: 1 done, 1 partial, 1 failed, 1 missing; estimated time of the runs not done: ? " \
                      "(--no-estimate)"
    chosen, skipped = pending(points, states, retry_failed=False)
    assert [p.label for p in chosen] == [points[1].label]
    assert "done, skipped" in skipped[0] and "--retry-failed resubmits it" in skipped[1]
    assert pending(points, states, retry_failed=True)[0] == points[1:]


def test_a_count_in_metrics_json_without_its_checkpoint_is_not_done(tmp_path):
    """metrics.json is a file a user can edit or copy in: the status never counts more tasks than the checkpoints
    with their checksum files show, so a sweep resubmits the run (norga train then verifies it against them)."""
    from norga.sweep.status import run_state

    folder = tmp_path / "run"
    put_metrics(folder, 3, status="complete")
    assert run_state(folder, 3) == RunState("done", 3, 3)
    (folder / "checkpoints" / "task_02.pt.sha256").unlink()  # the last task's checksum gone: not saved
    assert run_state(folder, 3) == RunState("partial", 2, 3)
    (folder / "checkpoints" / "task_00.pt.sha256").unlink()  # a gap at task 0: nothing counts after it
    assert run_state(folder, 3).text() == "partial: 0 of 3 tasks"


def test_status_of_a_folder_that_is_no_sweep_root_is_one_line(tmp_path, capsys):
    assert "is not a sweep root" in one_error(capsys, ["sweep", "status", str(tmp_path)])


def test_the_local_launcher_runs_n_at_a_time_with_one_gpu_each(tmp_path):
    stamp = ("import os, sys, time; t = time.time(); time.sleep(0.6); "
             "print(os.environ.get('CUDA_VISIBLE_DEVICES'), t, time.time()); sys.exit(int(sys.argv[1]))")
    commands = [[sys.executable, "-c", stamp, code] for code in ("0", "0", "3")]
    records = [tmp_path / "rec" / f"{i}.json" for i in range(3)]
    outcomes = launch(commands, "local", 2, tmp_path / "logs", gpus=["0", "1"], records=records)
    assert [o.returncode for o in outcomes] == [0, 0, 3]
    rows = [o.log.read_text().split() for o in outcomes]
    assert {rows[0][0], rows[1][0]} == {"0", "1"} and rows[2][0] in ("0", "1")  # one GPU each, never shared
    (d0, s0, e0), (d1, s1, e1) = [(r[0], float(r[1]), float(r[2])) for r in rows[:2]]
    assert max(s0, s1) < min(e0, e1)  # the first two ran at the same time
    assert json.loads(records[2].read_text())["returncode"] == 3


def test_launcher_mistakes_are_one_line(tmp_path, capsys, monkeypatch):
    spec = str(SHIPPED)
    assert "unknown launcher 'pbs'" in one_error(capsys, ["sweep", spec, "--out", str(tmp_path / "r"), "--launcher",
                                                          "pbs"])
    assert "go with --launcher slurm" in one_error(capsys, ["sweep", spec, "--out", str(tmp_path / "r"), "--nodes",
                                                            "2"])
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    line = one_error(capsys, ["sweep", spec, "--out", str(tmp_path / "r"), "--launcher", "slurm"])
    assert line == ("error: --launcher slurm needs submitit, which is not installed; pip install 'norga[cluster]' "
                    "(or pip install submitit), or use --launcher local")
    assert not (tmp_path / "r").exists()
    [ran] = launch([[sys.executable, "-c", "pass"]], "local", 1, tmp_path / "logs")  # local: no submitit needed
    assert ran.returncode == 0
    monkeypatch.delitem(sys.modules, "submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no srun
    line = one_error(capsys, ["sweep", spec, "--out", str(tmp_path / "r"), "--launcher", "slurm"])
    assert "sbatch and srun not found on PATH: this machine is no SLURM login node" in line
    assert not (tmp_path / "r").exists()


STUB_SBATCH = """#!/bin/sh
# a stand-in for SLURM's sbatch: keeps the submission file and answers as sbatch does
cp "$1" "$STUB_OUT/submission.sh"
echo "$@" > "$STUB_OUT/args.txt"
echo "Submitted batch job 4242"
"""


def test_the_slurm_submission_is_one_job_array_with_the_asked_resources(tmp_path, monkeypatch):
    """What `norga sweep --launcher slurm` hands to sbatch (through submitit's SlurmExecutor), checked by content:
    no SLURM cluster is here, so a stub sbatch keeps the script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(STUB_SBATCH)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it; never run here
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).chmod(0o755)
    root = tmp_path / "root"
    env = {**ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_OUT": str(tmp_path)}
    env.pop("SUBMITIT_PREEMPT_SIGNAL", None)
    done = subprocess.run([sys.executable, "-m", "norga", "sweep", str(SHIPPED), "--out", str(root), "--launcher",
                           "slurm", "--partition", "gpu", "--gpus-per-job", "2", "--time", "240", "--nodes", "2",
                           "--nproc", "2", "--array-parallelism", "1", "--slurm", "account=proj", "--slurm",
                           "qos=high", "--no-wait"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "submitted 2 job(s) (4242_0, 4242_1); norga sweep status" in done.stdout
    script = (tmp_path / "submission.sh").read_text()
    flags = {line.split("=")[0][len("#SBATCH "):]: line.split("=", 1)[1] for line in script.splitlines()
             if line.startswith("#SBATCH ") and "=" in line}
    assert {k: flags.get(k) for k in ("--array", "--partition", "--gpus-per-node", "--time", "--nodes",
                                      "--ntasks-per-node", "--signal", "--account", "--qos", "--job-name")} == {
        "--array": "0-1%1", "--partition": "gpu", "--gpus-per-node": "2", "--time": "240", "--nodes": "2",
        "--ntasks-per-node": "1", "--signal": "USR1@90", "--account": "proj", "--qos": "high", "--job-name": "norga"}
    assert "--requeue" not in flags and "\nexport SUBMITIT_PREEMPT_SIGNAL=USR1\n" in script  # the job's signal too
    assert "-m submitit.core._submit" in script and script.count("srun ") == 1
    pickles = sorted((root / "logs" / "submitit").glob("4242_*_submitted.pkl"))
    assert len(pickles) == 2
    jobs = [pickle.load(open(p, "rb")) for p in pickles]  # the DelayedSubmission of each array task
    spec = load_spec(SHIPPED)
    monkeypatch.chdir(tmp_path)  # where the sweep ran: the config is named as it was there (shipped: smoke)
    for job, point in zip(jobs, expand(spec, root)):
        command, log, record = job.args
        assert command == command_line(point, nproc=2, nodes=2) and "--rdzv-endpoint={rdzv_endpoint}" in command
        assert log == str(root / "logs" / point.label / "train.log") and record == str(record_path(root, point.label))
    status = subprocess.run([sys.executable, "-m", "norga", "sweep", "status", str(root)], capture_output=True,
                            text=True, env=env, timeout=60)
    assert status.stdout.splitlines()[-1] == "2 runs: 0 done, 0 partial, 0 failed, 2 missing"
