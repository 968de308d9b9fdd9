"""Issue #66: one error boundary. Every exception a command lets out that the user can fix (OS errors, allocator
failures, decode errors of files) is one ``error:`` line with exit status 2, a failed command leaves nothing
half-created, and a bug keeps its traceback."""
from __future__ import annotations

import errno
import hashlib
import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import yaml

from faults import train_args
from norga.commands import guard
from norga.commands.cli import main as norga
from norga.outputs import make_output_folder

ALLOC = "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"


def one_error(capsys, argv, status: int = 2) -> str:
    """Run ``norga argv``: its status is ``status``, stderr holds exactly one ``error:`` line and no traceback."""
    code = norga(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == status and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


def tree(root: Path) -> dict:
    """Every file below ``root`` with its sha256 (folders as None)."""
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def raised_while_reading(path: Path, read) -> BaseException:
    """The exception ``read(path)`` raises (a traceback whose frames hold ``path``, as in norga's own readers)."""
    try:
        read(path)
    except Exception as err:  # noqa: BLE001 - the test inspects it
        return err
    raise AssertionError(f"reading {path} raised nothing")


# ---- case 1: norga configs copy ------------------------------------------------------------------------------
def test_configs_copy_into_an_existing_file_is_one_line_and_changes_nothing(tmp_path, capsys):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    line = one_error(capsys, ["configs", "copy", "smoke", str(mine)])
    assert "is a file, not a folder" in line and str(mine) in line
    assert tree(tmp_path) == {"notes.txt": hashlib.sha256(b"mine\n").hexdigest()}


def test_configs_copy_never_replaces_a_users_file_and_force_replaces_only_an_earlier_copy(tmp_path, capsys):
    folder = tmp_path / "mine"
    assert norga(["configs", "copy", "smoke/l2p", str(folder)]) == 0
    line = one_error(capsys, ["configs", "copy", "smoke/l2p", str(folder)])
    assert "earlier norga configs copy" in line and "--force" in line
    assert norga(["configs", "copy", "smoke/l2p", str(folder), "--force"]) == 0  # unchanged copies: replaced
    (folder / "l2p.yaml").write_text("# edited\nbase: smoke.yaml\nseed: 5\n")
    before = tree(folder)
    for extra in ([], ["--force"]):  # an edited copy (the user's file now) is refused, --force or not
        line = one_error(capsys, ["configs", "copy", "smoke/l2p", str(folder), *extra])
        assert "l2p.yaml exists and norga did not write it" in line
        assert tree(folder) == before  # nothing written, not even smoke.yaml (every target is checked first)


# ---- case 2: a name too long for the file system -------------------------------------------------------------
def test_an_output_dir_name_too_long_is_one_line(tmp_path, capsys):
    out = tmp_path / ("x" * 300)
    line = one_error(capsys, ["train", *train_args(out)])
    assert "--output-dir" in line and "too long for this file system" in line and "choose a shorter" in line
    assert len(line) < 400 and list(tmp_path.iterdir()) == []


# ---- case 3: an allocator's failure, and nothing half-created -----------------------------------------------
def _fail_at(monkeypatch, name: str, after_tasks: int = 0) -> None:
    """Make ``norga.engine.task_loop.<name>`` raise an allocator's RuntimeError (after ``after_tasks`` calls)."""
    import norga.engine.task_loop as task_loop

    original, calls = getattr(task_loop, name), []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) > after_tasks:
            raise RuntimeError(ALLOC)
        return original(*args, **kwargs)

    monkeypatch.setattr(task_loop, name, failing)


@pytest.mark.integration
@pytest.mark.parametrize("stage", ["build_method", "_train_task"])  # before / after the run folder is claimed
def test_an_allocation_failure_is_one_line_and_leaves_no_run_folder(stage, tmp_path, monkeypatch, capsys):
    _fail_at(monkeypatch, stage)
    line = one_error(capsys, ["train", *train_args(tmp_path / "new" / "run")])
    assert line.startswith("error: out of memory (") and "can't allocate memory" in line
    assert "method.wtp.batch_size" in line
    assert list(tmp_path.iterdir()) == []  # neither the run folder nor the parent it created


@pytest.mark.integration
def test_a_failure_after_a_completed_task_keeps_the_run_to_resume(tmp_path, monkeypatch, capsys):
    _fail_at(monkeypatch, "_train_task", after_tasks=1)
    out = tmp_path / "run"
    one_error(capsys, ["train", *train_args(out)])
    assert (out / "checkpoints" / "task_00.pt").is_file() and not (out / "checkpoints" / "task_01.pt").exists()


# ---- case 4: OS errors, decode errors; bugs keep their traceback -------------------------------------------------
def _decode_errors(tmp_path: Path) -> list:
    """(exception, what its line must say) for each decode error of a user's file."""
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff\xfe{oops")
    cases = [(raised_while_reading(bad, lambda p: p.read_text(encoding="utf-8")), "not utf-8 text"),
             (raised_while_reading(bad, lambda p: json.loads(p.read_bytes()[2:].decode())), "not valid JSON"),
             (raised_while_reading(bad, lambda p: pickle.loads(p.read_bytes())), "cannot be unpickled"),
             (raised_while_reading(bad, lambda p: zipfile.ZipFile(p)), "a damaged archive")]
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n")
    with broken.open() as stream:
        cases.append((raised_while_reading(stream, yaml.safe_load), "not valid YAML at line 2"))
    return [(err, what, str(broken if "YAML" in what else bad)) for err, what in cases]


def test_decode_errors_of_files_are_one_line_naming_the_file(tmp_path):
    for err, what, name in _decode_errors(tmp_path):
        message = guard.user_error(err)
        assert message and what in message and name in message and "\n" not in message, (type(err), message)


@pytest.mark.parametrize("err, expected", [
    (OSError(errno.ENAMETOOLONG, "File name too long", "runs/" + "y" * 300), "too long for this file system"),
    (OSError(errno.EIO, "Input/output error", "data/x.png"), "data/x.png: Input/output error"),
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "check the network connection"),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "out of memory"),
    (RuntimeError(ALLOC), "out of memory"),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"), "out of memory"),
    (MemoryError(), "out of memory (MemoryError)"),
])
def test_os_and_memory_errors_are_one_line(err, expected):
    message = guard.user_error(err)
    assert message and expected in message and "\n" not in message and len(message) < 400


@pytest.mark.parametrize("err", [TypeError("unsupported operand"), AttributeError("no attribute"),
                                 KeyError("k"), ValueError("a bug"), RuntimeError("shape mismatch"),
                                 io.UnsupportedOperation("not readable")])
def test_bugs_are_not_mapped(err):
    assert guard.user_error(err) is None


def _raising(err: BaseException):
    def command():
        raise err
    return command


@pytest.mark.parametrize("err", [OSError(errno.EIO, "Input/output error", "x.bin"), RuntimeError(ALLOC),
                                 json.JSONDecodeError("Expecting value", "{", 1), EOFError("Ran out of input")])
def test_through_the_command_line_each_is_one_line_exit_2(err, monkeypatch, capsys):
    import norga.commands.cli as cli

    monkeypatch.setattr(cli, "list_main", _raising(err))
    one_error(capsys, ["list"])


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly_with_141():
    """``norga list | head -1``: the reader leaves before norga writes; no error line, the shell's SIGPIPE status."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "norga", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before norga (still importing) writes a line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == guard.STDOUT_CLOSED == 141 and err.decode().strip() == ""


def test_a_broken_pipe_elsewhere_is_still_one_line(monkeypatch, capsys):
    """A BrokenPipeError while standard output is fine (a socket's, say) is the usual one-line error, exit 2."""
    import norga.commands.cli as cli

    monkeypatch.setattr(cli, "list_main", _raising(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    assert "Broken pipe" in one_error(capsys, ["list"])


def test_a_bug_keeps_its_traceback_through_the_command_line(monkeypatch):
    import norga.commands.cli as cli

    monkeypatch.setattr(cli, "list_main", _raising(TypeError("a bug of ours")))
    with pytest.raises(TypeError, match="a bug of ours"):
        norga(["list"])


def test_a_real_undecodable_config_reaching_summarize_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_bytes(b"\xff\xfeseed: 0\n")
    (run / "metrics.json").write_text("{}")
    line = one_error(capsys, ["summarize", str(run)])
    assert str(run / "config.yaml") in line


# ---- the boundary itself: folders of a failed command go, those of a successful one stay ------------------------
@pytest.mark.parametrize("outcome", ["ok", "user error", "bug", "interrupt", "status 2"])
def test_new_empty_folders_are_undone_on_failure_and_kept_on_success(outcome, tmp_path, capsys):
    target = tmp_path / "a" / "b"
    raised = {"user error": OSError(errno.EIO, "Input/output error"), "bug": TypeError("bug"),
              "interrupt": KeyboardInterrupt()}

    def action() -> int:
        make_output_folder(target, "--out")
        if outcome in raised:
            raise raised[outcome]
        return 2 if outcome == "status 2" else 0

    if outcome == "bug":
        with pytest.raises(TypeError):
            guard.guarded(action, lambda: "nothing was written")
    else:
        status = guard.guarded(action, lambda: "nothing was written")
        assert status == {"ok": 0, "user error": 2, "interrupt": 130, "status 2": 2}[outcome]
    assert target.is_dir() == (outcome == "ok") and (tmp_path / "a").exists() == (outcome == "ok")
