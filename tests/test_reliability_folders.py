"""Break-it matrix of the run folder (issue #53): whatever is in the output folder or among the checkpoints, norga
either gives the correct result or stops with one clear line (exit 2) and leaves every file byte for byte as it was.

Two tiny runs (seeds 0 and 1, tests/faults.py) are trained once per module; every case works on copies.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import yaml

from faults import SMOKE, TINY, assert_one_line_error, assert_same_metrics, train_args
from norga.commands.cli import main as norga

pytestmark = pytest.mark.integration  # trains two tiny runs (module fixture)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Path]:
    """Finished tiny runs ``a`` (seed 0) and ``b`` (seed 1, so another run id, config and class order)."""
    root = tmp_path_factory.mktemp("runs")
    for name, extra in (("a", ()), ("b", ("--set", "seed=1"))):
        assert norga(["train", *train_args(root / name, *extra)]) == 0
    return {"a": root / "a", "b": root / "b"}


def tree(folder: Path) -> Dict[str, str]:
    """relative path -> sha256 of every file under ``folder`` (hidden ones too); folders as 'dir'."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def cli(capsys, *argv: str) -> Tuple[int, str, str]:
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def copy(runs, name: str, dest: Path) -> Path:
    shutil.copytree(runs[name], dest)
    return dest


def resave(run: Path, task: int, change: Callable[[dict], None]) -> None:
    """Checkpoint ``task`` of ``run`` changed by ``change`` and saved again with a matching checksum file."""
    from norga.engine.run_folder import RunDir

    state = RunDir(run).load_checkpoint(task)
    change(state)
    RunDir(run).save_checkpoint(task, state)


def as_older_norga(run: Path) -> Path:
    """``run`` as a norga before the run marker wrote it: no norga-run.json, checkpoints without run identity."""
    (run / "norga-run.json").unlink()
    for task in range(3):
        resave(run, task, lambda state: state.pop("run", None))
    return run


def drop_checkpoints(run: Path, *tasks: int) -> Path:
    for task in tasks:
        for path in (run / "checkpoints").glob(f"task_{task:02d}.pt*"):
            path.unlink()
    return run


# ---- the matrix: every case stops with one line and changes nothing ----------------------------------------
def output_folder_cases(tmp: Path, runs) -> Dict[str, Tuple[List[str], Path, List[str]]]:
    """case -> (norga arguments, the folder that must stay as it was, fragments of the one error line)."""
    def user_folder(name: str, files: Dict[str, str]) -> Path:
        folder = tmp / name
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        return folder

    own = user_folder("myexp", {"config.yaml": f"# my experiment\nbase: {SMOKE}\nseed: 3\n"})
    with_config = user_folder("with_config", {"config.yaml": "seed: 1\n"})
    with_metrics = user_folder("with_metrics", {"metrics.json": '{"FA": 0.9}\n'})
    with_plot = user_folder("with_plot", {"plots/loss.png": "my figure"})
    bad_marker = user_folder("bad_marker", {"norga-run.json": "not json", "notes.txt": "mine"})
    my_summary = user_folder("my_summary", {"summary.md": "# my notes\n"})
    run_copy = copy(runs, "a", tmp / "run_copy")
    train = lambda out, *extra: ["train", *train_args(out, *extra)]  # noqa: E731
    return {
        "1: --config is the output folder's config.yaml": (
            ["train", "--config", str(own / "config.yaml"), "--output-dir", str(own), *TINY], own,
            ["lies in the output folder", "config.yaml", "--output-dir"]),
        "1: output folder holds the user's config.yaml": (train(with_config), with_config,
                                                          ["not a norga run folder", "config.yaml", "--output-dir"]),
        "1: output folder holds the user's metrics.json": (train(with_metrics), with_metrics,
                                                           ["not a norga run folder", "metrics.json"]),
        "1: output folder holds the user's plots/loss.png": (train(with_plot), with_plot,
                                                             ["not a norga run folder", "plots/"]),
        "1: a file named like the marker that is not one": (train(bad_marker), bad_marker,
                                                            ["norga-run.json is unreadable or not a norga run marker"]),
        "1: --config is a norga run's own config.yaml": (
            ["train", "--config", str(run_copy / "config.yaml"), "--output-dir", str(run_copy)], run_copy,
            ["lies in the output folder", "config.yaml"]),
        "eval of a folder that is no run": (["eval", "--run", str(with_metrics)], with_metrics,
                                            ["not a norga run folder"]),
        "routes of a folder that is no run": (["routes", "--run", str(with_plot)], with_plot,
                                              ["not a norga run folder"]),
        "summarize --out holds the user's summary.md": (["summarize", str(runs["a"]), "--out", str(my_summary)],
                                                        my_summary, ["summary.md exists and norga did not write it"]),
    }


def checkpoint_cases(tmp: Path, runs) -> Dict[str, Tuple[List[str], Path, List[str]]]:
    def case(name: str, source: str = "a") -> Path:
        return copy(runs, source, tmp / name.replace(" ", "_"))

    missing_first = drop_checkpoints(case("missing first"), 0)
    missing_middle = drop_checkpoints(case("missing middle"), 1)
    corrupt_first = case("corrupt first")
    (corrupt_first / "checkpoints" / "task_00.pt").write_bytes(b"garbage")
    swapped = case("swapped")
    ckpt = swapped / "checkpoints"
    for a, b in (("task_01.pt", "tmp.pt"), ("task_02.pt", "task_01.pt"), ("tmp.pt", "task_02.pt")):
        (ckpt / a).rename(ckpt / b)
    for task in (1, 2):  # checksums made to match, so only the content tells the order
        digest = hashlib.sha256((ckpt / f"task_{task:02d}.pt").read_bytes()).hexdigest()
        (ckpt / f"task_{task:02d}.pt.sha256").write_text(f"{digest}  task_{task:02d}.pt\n")
    foreign = drop_checkpoints(case("foreign", "b"), 2)  # case 4: run b with run a's task 1 copied in
    for path in (runs["a"] / "checkpoints").glob("task_01.pt*"):
        shutil.copy2(path, foreign / "checkpoints" / path.name)
    foreign_eval = case("foreign eval")
    for path in (runs["b"] / "checkpoints").glob("task_02.pt*"):
        shutil.copy2(path, foreign_eval / "checkpoints" / path.name)
    older = case("older checkpoint")  # an older norga's checkpoint (no run id) put into a marked run
    resave(older, 2, lambda state: state.pop("run", None))
    other_config = case("other config")  # case 3: another run's config.yaml copied in
    shutil.copy2(runs["b"] / "config.yaml", other_config / "config.yaml")
    split = case("test split edited")
    config = yaml.safe_load((split / "config.yaml").read_text())
    config["data"]["options"]["test_per_class"] = 3
    (split / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    user_output = case("user output")
    (user_output / "mine.json").write_text('{"mine": 1}\n')
    return {
        "2: task_00.pt missing, eval": (["eval", "--run", str(missing_first)], missing_first,
                                        ["task_00.pt (task 0) is missing", "task_01.pt, task_02.pt"]),
        "2: task_00.pt missing, train": (["train", *train_args(missing_first)], missing_first,
                                         ["task_00.pt (task 0) is missing", "nothing was written"]),
        "2: task_01.pt missing, train": (["train", *train_args(missing_middle)], missing_middle,
                                         ["task_01.pt (task 1) is missing", "task_02.pt"]),
        "2: task_00.pt corrupt before intact ones": (["train", *train_args(corrupt_first)], corrupt_first,
                                                     ["task_00.pt (task 0) is corrupt", "later checkpoints exist"]),
        "2: checkpoints swapped": (["eval", "--run", str(swapped)], swapped,
                                   ["task_01.pt holds task 2, not task 1"]),
        "3: another run's config.yaml, eval": (["eval", "--run", str(other_config)], other_config,
                                               ["config.yaml disagrees with the config its checkpoints", "'seed'"]),
        "3: another run's config.yaml, train": (["train", *train_args(other_config)], other_config,
                                                ["config.yaml disagrees", "'seed'"]),
        "3: test_per_class edited in config.yaml": (["eval", "--run", str(split)], split,
                                                    ["differing: ['data.options.test_per_class']"]),
        "3: --set of a key the checkpoints learned": (["eval", "--run", str(user_output),
                                                       "--set", "seed=1"], user_output, ["['seed']", "--set"]),
        "eval --output is the user's file": (["eval", "--run", str(user_output), "--output",
                                              str(user_output / "mine.json")], user_output,
                                             ["where this command writes only eval.json", "--output"]),
        "4: foreign task_01.pt, train --set seed=1": (["train", *train_args(foreign, "--set", "seed=1")], foreign,
                                                       ["task_01.pt (task 1) belongs to another run"]),
        "4: foreign task_02.pt, eval": (["eval", "--run", str(foreign_eval)], foreign_eval,
                                        ["task_02.pt (task 2) belongs to another run"]),
        "4: an older norga's checkpoint in a marked run": (["train", *train_args(older)], older,
                                                            ["task_02.pt (task 2) carries no run id"]),
    }


CASES = ["1: --config is the output folder's config.yaml", "1: output folder holds the user's config.yaml",
         "1: output folder holds the user's metrics.json", "1: output folder holds the user's plots/loss.png",
         "1: a file named like the marker that is not one", "1: --config is a norga run's own config.yaml",
         "eval of a folder that is no run", "routes of a folder that is no run",
         "summarize --out holds the user's summary.md",
         "2: task_00.pt missing, eval", "2: task_00.pt missing, train", "2: task_01.pt missing, train",
         "2: task_00.pt corrupt before intact ones", "2: checkpoints swapped", "3: another run's config.yaml, eval",
         "3: another run's config.yaml, train", "3: test_per_class edited in config.yaml",
         "3: --set of a key the checkpoints learned", "eval --output is the user's file",
         "4: foreign task_01.pt, train --set seed=1", "4: foreign task_02.pt, eval",
         "4: an older norga's checkpoint in a marked run"]


@pytest.fixture(scope="module")
def matrix(runs, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("matrix")
    return {**output_folder_cases(tmp / "out", runs), **checkpoint_cases(tmp / "ckpt", runs)}


def test_the_matrix_lists_every_case(matrix):
    assert sorted(matrix) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_break_it_stops_with_one_line_and_changes_nothing(matrix, case, capsys):
    argv, folder, fragments = matrix[case]
    before = tree(folder)
    status, out, err = cli(capsys, *argv)
    line = assert_one_line_error(status, err, *fragments)
    assert "--force" not in line and "new run in" not in out
    assert tree(folder) == before, case


# ---- the cases with a correct result ----------------------------------------------------------------------
def test_an_empty_folder_becomes_a_run_whose_marker_is_written_first(runs, tmp_path, capsys):
    from norga.engine.run_folder import RunDir
    from norga.engine.run_marker import read_marker

    out = tmp_path / "empty"
    out.mkdir()
    status, _, err = cli(capsys, "train", *train_args(out))
    assert status == 0, err[-2000:]
    marker = read_marker(out)
    assert marker.run_id != read_marker(runs["a"]).run_id and marker.config_hash == read_marker(runs["a"]).config_hash
    assert all(RunDir(out).load_checkpoint(t)["run"] == {"run_id": marker.run_id, "config_hash": marker.config_hash}
               for t in range(3))
    first = min(out.rglob("*"), key=lambda p: p.stat().st_mtime_ns if p.is_file() else float("inf"))
    assert first.name == "norga-run.json"


def test_an_older_norgas_run_is_recognised_resumed_and_evaluated(runs, tmp_path, capsys):
    from norga.engine.run_folder import RunDir
    from norga.engine.run_marker import read_marker

    run = drop_checkpoints(as_older_norga(copy(runs, "a", tmp_path / "older")), 2)
    status, _, err = cli(capsys, "eval", "--run", str(run))
    assert status == 0 and not (run / "norga-run.json").exists(), err[-2000:]  # eval reads, adds no marker
    status, _, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    marker = read_marker(run)
    assert marker.adopted_tasks == 2 and RunDir(run).load_checkpoint(2)["run"]["run_id"] == marker.run_id
    assert_same_metrics(json.loads((run / "metrics.json").read_text()),
                        json.loads((runs["a"] / "metrics.json").read_text()))


def test_eval_on_another_test_split_uses_the_checkpoints_config_and_says_so(runs, tmp_path, capsys):
    run = copy(runs, "a", tmp_path / "split")
    (run / "config.yaml").unlink()  # the checkpoints are the record: eval does not need it
    status, out, err = cli(capsys, "eval", "--run", str(run), "--set", "data.options.test_per_class=3")
    assert status == 0, err[-2000:]
    assert "warning:" in err and "data.options.test_per_class: 6 -> 3" in err
    evaluated, trained = (json.loads((p).read_text()) for p in (run / "eval.json", runs["a"] / "metrics.json"))
    assert evaluated["eval_overrides"] == {"data.options.test_per_class": [6, 3]}
    for key in ("seed", "class_order", "task_classes", "config_history"):
        assert evaluated[key] == trained[key], key  # never another config's seed or class order with this hash
    assert evaluated["data"] != trained["data"]  # the smaller split was used


def test_eval_with_the_checkpoints_own_config_file_is_the_plain_evaluation(runs, tmp_path, capsys):
    run = copy(runs, "a", tmp_path / "own")
    own = tmp_path / "own.yaml"
    shutil.copy2(run / "config.yaml", own)
    status, _, err = cli(capsys, "eval", "--run", str(run), "--config", str(own), "--output", str(tmp_path / "e.json"))
    assert status == 0 and "warning" not in err, err[-2000:]
    evaluated = json.loads((tmp_path / "e.json").read_text())
    assert evaluated["eval_overrides"] == {}
    assert evaluated["acc_matrix"] == json.loads((runs["a"] / "metrics.json").read_text())["acc_matrix"]
    status, _, err = cli(capsys, "eval", "--run", str(run), "--output", str(tmp_path / "e.json"))
    assert status == 0, err[-2000:]  # an earlier eval output is replaced


def test_summarize_replaces_only_its_own_outputs(runs, tmp_path, capsys):
    out = tmp_path / "summary"
    for _ in range(2):  # a new folder, then norga summarize's own files again
        status, _, err = cli(capsys, "summarize", str(runs["a"]), str(runs["b"]), "--out", str(out))
        assert status == 0, err[-2000:]
    (out / "summary.csv").write_text("my own table\n")
    before = tree(out)
    status, _, err = cli(capsys, "summarize", str(runs["a"]), str(runs["b"]), "--out", str(out))
    assert_one_line_error(status, err, "summary.csv exists and norga did not write it (or it was edited since)")
    assert tree(out) == before
