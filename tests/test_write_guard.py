"""The one write guard (norga/outputs.py): its rules by hand, then the whole command tree.

The command-tree test walks every ``norga`` command's argparse parser (the delegated ones too), finds every
option that names where the command writes (its ``type`` is :class:`norga.outputs.OutputPath`), and points it
at a user's file, at a run's own files and at an export's own files: each command must end in one ``error:``
line with a non-zero exit and leave every file of the tree byte for byte as it was. A new output option
without a scenario here fails the test; so does a new ``type=Path`` option that is neither an output nor
declared an input below.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
from test_data_prepare import fixture_sizes, sha256  # noqa: F401 - a fixture
from test_data_verify import cifar_mirror

from norga.commands.cli import DELEGATED, main as norga
from norga.outputs import (MANIFEST, OUTPUT_FILE, OutputPath, OutputRefused, Zone, check_output,
                           make_output_folder, read_manifest, undo_new_folders, write_output)

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "norga"


# ---- the rules, by hand ------------------------------------------------------------------------------
def test_a_file_norga_wrote_is_replaced_and_an_edited_one_is_refused(tmp_path):
    out = tmp_path / "a" / "eval.json"
    write_output(out, b"one", "--output")
    assert read_manifest(out.parent) == {"eval.json": hashlib.sha256(b"one").hexdigest()}
    write_output(out, b"two", "--output")  # norga's own, unchanged: replaced
    assert out.read_bytes() == b"two"
    out.write_bytes(b"edited by the user")
    with pytest.raises(OutputRefused, match="did not write it .or it was edited since."):
        write_output(out, b"three", "--output")
    assert out.read_bytes() == b"edited by the user"


def test_a_users_file_is_never_replaced(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    with pytest.raises(OutputRefused, match=r"--output .*notes.txt exists and norga did not write it"):
        write_output(mine, b"x", "--output")
    assert mine.read_text() == "mine" and not (tmp_path / MANIFEST).exists()


def test_nothing_is_written_inside_a_zone_but_by_its_owner(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "norga-run.json").write_text("{}")
    for path in (run / "metrics.json", run / "checkpoints" / "new.json", run / "eval.json"):
        with pytest.raises(OutputRefused, match="lies inside the run folder"):
            check_output(path, "--output")
    own = Zone(run, frozenset({"eval.json"}))
    write_output(run / "eval.json", b"{}", "--output", own)
    with pytest.raises(OutputRefused, match="inside the run folder .*, where this command writes only eval.json"):
        write_output(run / "checkpoints" / "task_00.pt", b"x", "--output", own)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "eval.json", "norga-run.json"]  # no manifest


def test_a_symlink_into_a_zone_is_caught(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "norga-run.json").write_text("{}")
    (tmp_path / "link").symlink_to(run)
    with pytest.raises(OutputRefused, match="lies inside the run folder"):
        check_output(tmp_path / "link" / "metrics.json", "--output")


def test_bad_paths_are_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    cases = {"": "is empty", str(tmp_path / "file" / "out.json"): "is a file, not a folder",
             str(tmp_path): "is a folder", str(tmp_path / ("n" * 300) / "out.json"): "too long"}
    for path, message in cases.items():
        with pytest.raises(OutputRefused, match=message):
            check_output(Path(path), "--output")


def test_folders_a_failed_command_created_are_removed(tmp_path):
    undo_new_folders()
    kept = tmp_path / "kept"
    kept.mkdir()
    make_output_folder(tmp_path / "new" / "deeper", "--out")
    write_output(tmp_path / "written" / "x.json", b"{}", "--out")
    assert undo_new_folders() == [tmp_path / "new" / "deeper", tmp_path / "new"]  # newest first; not emptied
    assert kept.is_dir() and (tmp_path / "written" / "x.json").is_file()


def test_an_output_option_refuses_an_empty_path():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--output", type=OUTPUT_FILE)
    with pytest.raises(SystemExit):
        parser.parse_args(["--output", ""])
    assert parser.parse_args(["--output", "a"]).output == Path("a")


# ---- every write of the package goes through the guard ---------------------------------------------------
# the only files that write without norga.outputs; elsewhere a raw write carries ``# guarded: <why>`` on its line
RAW_WRITES_ALLOWED = {"norga/files.py": "the atomic write itself", "norga/outputs.py": "the guard"}
RAW_WRITE = re.compile(r"atomic_write_bytes\(|\.write_bytes\(|\.write_text\(|open\([^)]*['\"][wax]b?['\"]|"
                       r"torch\.save\([^,]+,\s*(?!buffer\b)[\w(\"']|save_file\(|savefig\((?!buffer)|shutil\.copy")


def test_every_write_in_the_package_goes_through_the_guard():
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name in RAW_WRITES_ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if RAW_WRITE.search(code) and "import" not in code and "# guarded: " not in line:
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "writes that bypass norga.outputs (use write_output / make_output_folder):\n" + "\n".join(found)


# ---- the command tree -------------------------------------------------------------------------------------
class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def _parser_of(entry, argv) -> argparse.ArgumentParser:
    """The parser a command entry point builds (captured when it parses, before it does anything)."""
    def capture(parser, *args, **kwargs):
        raise _Captured(parser)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture):
        try:
            entry(argv)
        except _Captured as got:
            return got.parser
    raise AssertionError(f"{entry} parsed no arguments")


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_tree():
    """(command path, parser) of every norga command and subcommand, the delegated ones through their own
    entry points."""
    top = _parser_of(norga, ["list"])
    stack = []
    for name, sub in _subcommands(top).items():
        stack.append(((name,), _parser_of(DELEGATED[name], []) if name in DELEGATED else sub))
    while stack:
        path, parser = stack.pop()
        yield path, parser
        stack += [((*path, name), sub) for name, sub in _subcommands(parser).items()]


def option_name(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def tree_options(kind):
    return {(" ".join(path), option_name(action)) for path, parser in command_tree() for action in parser._actions
            if kind(action)}


# options typed Path that name what a command reads (not where it writes)
INPUT_PATHS = {("eval", "--run"), ("eval", "--from"), ("export", "--run"), ("routes", "--run"), ("summarize", "runs"),
               ("summarize", "--vs"), ("reproduce", "--manifest"), ("data prepare", "--mirror"), ("sweep", "spec")}


def test_every_path_option_is_an_output_or_a_declared_input():
    paths = tree_options(lambda a: a.type is Path or getattr(a.type, "__name__", "") == "Path")
    assert paths <= INPUT_PATHS, f"classify as output (type=OUTPUT_FILE/FOLDER) or input: {paths - INPUT_PATHS}"


def tree_hash(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_run):
    """A tree with a finished run, its export and a user's folder (``user/notes.txt``, and files named as norga's
    outputs that the user wrote)."""
    root = tmp_path_factory.mktemp("guard")
    shutil.copytree(tiny_run, root / "run")
    assert norga(["export", "--run", str(root / "run"), "--out", str(root / "exp")]) == 0
    user = root / "user"
    user.mkdir()
    for name in ("notes.txt", "eval.json", "summary.md", "reproduce.md", "smoke.yaml", "config.yaml", "metrics.json",
                 "README.md", "cifar-100-python/train"):
        (user / name).parent.mkdir(exist_ok=True)
        (user / name).write_text(f"the user's own {name}\n")
    return root


@pytest.fixture
def mirror(tmp_path, fixture_sizes):  # noqa: F811 - fixture_sizes: the small archive's sizes pass verification
    """A --mirror folder holding a small, valid CIFAR-100 archive (outside the hashed tree)."""
    folder = cifar_mirror(tmp_path)
    return {"mirror": folder, "archive_sha": sha256(folder / "cifar-100-python.tar.gz")}


def file_targets(w: Path):
    return [w / "user" / "notes.txt", w / "user" / "eval.json", w / "run" / "metrics.json",
            w / "run" / "checkpoints" / "task_01.pt", w / "exp" / "README.md", w / "exp" / "config.yaml",
            w / "exp" / "state" / "task_00.json"]


def folder_targets(w: Path):
    return [w / "user" / "notes.txt", w / "user", w / "run" / "checkpoints", w / "exp", w / "exp" / "state"]


SMOKE = str(REPO / "configs" / "smoke.yaml")
# (command, option) -> (kind, argv with the target in place of X)
SCENARIOS = {
    ("train", "--output-dir"): ("folder", ["train", "--config", SMOKE, "--output-dir", "X"]),
    ("train", "--feature-cache"): ("folder", ["train", "--config", SMOKE, "--output-dir", "{w}/fresh_run",
                                              "--feature-cache", "X"]),
    ("eval", "--output"): ("file", ["eval", "--run", "{w}/run", "--output", "X"]),
    ("eval", "--output", "from"): ("file", ["eval", "--from", "{w}/exp", "--output", "X"]),
    ("eval", "--feature-cache"): ("folder", ["eval", "--run", "{w}/run", "--output", "{w}/fresh/e.json",
                                             "--feature-cache", "X"]),
    ("export", "--out"): ("folder", ["export", "--run", "{w}/run", "--out", "X"]),
    ("summarize", "--out"): ("folder", ["summarize", "{w}/run", "--out", "X"]),
    ("reproduce", "--out"): ("folder", ["reproduce", "--table", "1", "--rows", "sup21k", "--out", "X", "--report"]),
    ("reproduce", "--readme"): ("file", ["reproduce", "--table", "1", "--rows", "sup21k", "--out", "{w}/fresh_repro",
                                         "--report", "--readme", "X"]),
    ("reproduce", "--feature-cache"): ("folder", ["reproduce", "--table", "1", "--rows", "sup21k", "--out",
                                                   "{w}/fresh_repro", "--dry-run", "--no-estimate",
                                                   "--feature-cache", "X"]),
    ("sweep", "--out"): ("folder", ["sweep", str(REPO / "configs" / "sweeps" / "smoke_grid.yaml"), "--out", "X"]),
    ("sweep", "--feature-cache"): ("folder", ["sweep", str(REPO / "configs" / "sweeps" / "smoke_grid.yaml"), "--out",
                                              "{w}/fresh_sweep", "--feature-cache", "X"]),
    ("tune", "--out"): ("folder", ["tune", str(REPO / "configs" / "tune" / "smoke.yaml"), "--out", "X"]),
    ("configs copy", "folder"): ("folder", ["configs", "copy", "smoke", "X"]),
    ("data prepare", "--root"): ("folder", ["data", "prepare", "cifar100", "--root", "X", "--mirror", "{mirror}",
                                            "--no-progress", "--sha256", "cifar-100-python.tar.gz={archive_sha}"]),
}


def test_every_output_option_has_its_scenarios():
    outputs = tree_options(lambda a: isinstance(a.type, OutputPath))
    assert outputs == {key[:2] for key in SCENARIOS}, "every output option needs a scenario in SCENARIOS"


@pytest.mark.integration
@pytest.mark.parametrize("key", list(SCENARIOS), ids=lambda k: "-".join(k).replace("--", ""))
def test_no_output_option_replaces_a_file_it_does_not_own(key, world, mirror, capsys):
    kind, template = SCENARIOS[key]
    targets = file_targets(world) if kind == "file" else folder_targets(world)
    before = tree_hash(world)
    for target in targets:
        argv = [str(target) if part == "X" else part.format(w=world, **mirror) for part in template]
        capsys.readouterr()
        code = norga(argv)
        err = capsys.readouterr().err
        assert code != 0, f"{' '.join(argv)} succeeded"
        assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
        assert "Traceback" not in err
        assert tree_hash(world) == before, f"{' '.join(argv)} changed files"


@pytest.mark.parametrize("command", ["train", "eval"])
def test_an_unwritable_feature_cache_is_named_before_anything_is_created(command, tmp_path, tiny_run, capsys,
                                                                         monkeypatch):
    import norga.toolkit.store_folder as store_folder

    read_only = tmp_path / "ro"
    read_only.mkdir()
    monkeypatch.setattr(store_folder.os, "access", lambda path, mode: Path(path) != read_only)
    argv = (["train", "--config", SMOKE, "--output-dir", str(tmp_path / "run")] if command == "train" else
            ["eval", "--run", str(tiny_run), "--output", str(tmp_path / "out" / "e.json")])
    before = tree_hash(tmp_path)
    assert norga([*argv, "--feature-cache", str(read_only)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and f"--feature-cache {read_only}: {read_only} is not writable" in err, err
    assert "--output-dir" not in err and tree_hash(tmp_path) == before  # no started run folder, no output folder


@pytest.mark.parametrize("window", ["before the listing", "before the zone look"])
def test_a_store_claimed_by_a_concurrent_job_between_two_looks_is_a_store(window, tmp_path, monkeypatch):
    """check_store looks at the marker, lists the folder, then looks for a zone: a concurrent job of a sweep may
    rename its marker into place between those looks; the folder is then a store, never 'foreign' nor 'inside
    itself' (seen in CI with 3 processes claiming 30 stores at once)."""
    import norga.toolkit.store_folder as store_folder
    from norga.outputs import STORE_MARKER

    root = tmp_path / "store"
    root.mkdir()

    def claim_concurrently():
        (root / STORE_MARKER).write_text('{"format": "%s"}\n' % store_folder.FORMAT)

    if window == "before the listing":
        listing = Path.iterdir
        monkeypatch.setattr(Path, "iterdir", lambda self: (claim_concurrently(), listing(self))[1])
    else:
        looks = store_folder.zone_of
        monkeypatch.setattr(store_folder, "zone_of", lambda path: (claim_concurrently(), looks(path))[1])
    assert store_folder.check_store(root) is True
    monkeypatch.undo()
    assert store_folder.check_store(root) is True and [p.name for p in root.iterdir()] == [STORE_MARKER]
