"""The norga command (train, eval, summarize, list, --version) and the run folder it writes."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults import ENV, REPO, train_args
from norga import __version__
from norga.commands.cli import main as norga


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=300)


def test_version_and_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "norga", "--version"], capture_output=True, text=True, env=ENV,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"norga {__version__}"


def test_console_script_is_declared():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        scripts = [e for e in distribution("norga").entry_points if e.group == "console_scripts"]
    except PackageNotFoundError:
        pytest.skip("norga is not installed (pip install -e .)")
    assert [(e.name, e.value) for e in scripts] == [("norga", "norga.commands.cli:main")]


def test_list_names_every_registered_item(capsys):
    from norga.data import BENCHMARKS
    from norga.models import ACTIVATIONS, GATES
    from norga.models.backbone import BACKBONE_PRESETS

    assert norga(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*GATES, *ACTIVATIONS, *BENCHMARKS, *BACKBONE_PRESETS, "hideprompt", "covariance"]:
        assert name in out, name
    for preset in BACKBONE_PRESETS.values():
        assert preset.model_name in out


@pytest.mark.parametrize("args, message", [
    (["--set", "method.wtp.epoch=3"], "unknown key(s) ['method.wtp.epoch']"),
    (["--set", "model.name=null"], "model: set model.preset"),
    (["--set", "method.wtp.lr=[1,"], "the value is not valid YAML"),
    (["--config", "configs/nope.yaml"], "config file not found: configs/nope.yaml"),
    (["--output-dir", "README.md"], "output folder README.md exists and is not a folder"),
])
def test_config_errors_come_before_torch_is_imported(args, message, tmp_path):
    code = (f"import sys, time; t = time.time(); from norga.commands.cli import main; "
            f"rc = main(['train', *{train_args(tmp_path / 'run')!r}, *{args!r}]); "
            "print(rc, 'torch' in sys.modules, 'timm' in sys.modules, round(time.time() - t, 2))")
    done = python(code)
    status, torch_loaded, timm_loaded, seconds = done.stdout.split()
    assert (status, torch_loaded, timm_loaded) == ("2", "False", "False"), done.stderr
    assert done.stderr.count("error:") == 1 and message in done.stderr and "Traceback" not in done.stderr
    assert float(seconds) < 5


def test_summarize_is_delegated_lazily(capsys, monkeypatch):
    if _has_summarize():
        with pytest.raises(SystemExit) as done:
            norga(["summarize", "--help"])
        assert done.value.code == 0 and "summarize" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "norga.commands.summarize", None)  # as if the module were absent
    assert norga(["summarize", "runs/x"]) == 2
    assert "'norga summarize' is not available" in capsys.readouterr().err


def _has_summarize() -> bool:
    try:
        import norga.commands.summarize  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the run folder --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_umask_027(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    old = os.umask(0o027)
    try:
        assert norga(["train", *train_args(out)]) == 0
    finally:
        os.umask(old)
    return out


def test_files_follow_the_umask(run_umask_027):
    files = [p for p in run_umask_027.rglob("*") if p.is_file()]
    assert {"metrics.json", "config.yaml", "acc_matrix.csv", "log.txt", "task_00.pt", "task_00.pt.sha256"} <= {
        p.name for p in files}
    modes = {p.relative_to(run_umask_027).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {"0o640"}, modes


def test_metrics_record_norga_version_and_git_commit(run_umask_027):
    info = json.loads((run_umask_027 / "metrics.json").read_text())["norga"]
    assert info["version"] == __version__
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert info["git_commit"] == head.stdout.strip() and isinstance(info["git_dirty"], bool)


def test_tasks_are_numbered_from_zero_everywhere(run_umask_027):
    log = (run_umask_027 / "log.txt").read_text()
    assert "task 0 done (1 of 3)" in log and "task 2 done (3 of 3)" in log and "task 3" not in log
    assert sorted(p.name for p in (run_umask_027 / "checkpoints").glob("*.pt")) == [
        "task_00.pt", "task_01.pt", "task_02.pt"]
    rows = (run_umask_027 / "acc_matrix.csv").read_text().splitlines()
    assert rows[0] == "evaluated_task,after_task_0,after_task_1,after_task_2"
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"] and rows[3].startswith("2,,,")


def test_finished_run_says_run_complete_at_once(run_umask_027, capsys):
    started = time.time()
    assert norga(["train", *train_args(run_umask_027)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run complete: FA ") and "(3 of 3 tasks)" in out and time.time() - started < 5


def test_eval_json_records_eval_time_not_fake_training_times(run_umask_027, tmp_path, capsys):
    target = tmp_path / "eval.json"
    assert norga(["eval", "--run", str(run_umask_027), "--output", str(target)]) == 0
    evaluated = json.loads(target.read_text())
    trained = json.loads((run_umask_027 / "metrics.json").read_text())
    assert "task_seconds" not in evaluated and len(evaluated["eval_seconds"]) == 3
    assert all(s > 0 for s in evaluated["eval_seconds"])
    assert evaluated["acc_matrix"] == trained["acc_matrix"]
    assert "3 of 3 tasks evaluated" in capsys.readouterr().out


# ---- issue #66: one boundary for every command ------------------------------------------------------------------
def test_help_names_every_command(capsys):
    with pytest.raises(SystemExit) as done:
        norga(["--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]  # the paragraph after the usage
    assert done.value.code == 0
    for name in ("train", "eval", "export", "summarize", "reproduce", "routes", "doctor", "data", "configs", "list"):
        assert name in description.replace("|", " ").split(), name
        assert f"    {name}" in out, name  # its line in the list of commands


COMMANDS = {"train": ["train", "--config", "smoke"], "eval": ["eval", "--run", "runs/x"],
            "export": ["export", "--run", "runs/x", "--out", "x"], "summarize": ["summarize", "runs/x"],
            "configs": ["configs"], "data": ["data", "list"], "reproduce": ["reproduce", "--dry-run"],
            "routes": ["routes", "--run", "runs/x"], "doctor": ["doctor"], "list": ["list"]}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_runs_inside_the_boundary(name, monkeypatch):
    import norga.commands.cli as cli
    import norga.commands.guard as guard

    entered = []

    def recording(action, on_interrupt, on_failure=None):
        entered.append(action)
        return 0

    monkeypatch.setattr(guard, "guarded", recording)
    monkeypatch.setattr(cli, "guarded", recording)
    assert norga(COMMANDS[name]) == 0 and len(entered) == 1, name
