"""The smaller items of issue #53: messages that name what exists, and files that say only what is true.

``norga eval`` names its own ``--output``; ``norga list`` gives whole sentences; ``norga data prepare`` puts a
benchmark where the shipped configs read it; a failed run's metrics.json describes its saved tasks only;
``norga doctor`` offers a torch/torchvision install that needs no build index.
"""
from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT as REPO
from faults import assert_one_line_error, train_args
from norga.commands.cli import main as norga
from norga.config import load_config



def cli(capsys, *argv: str):
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("messages") / "run"
    assert norga(["train", *train_args(out)]) == 0
    return out


# ---- norga eval ---------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_eval_into_a_read_only_folder_names_its_own_output_option(finished, monkeypatch, capsys):
    import norga.files

    def read_only(f, data, path):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(norga.files, "_write", read_only)
    status, _, err = cli(capsys, "eval", "--run", str(finished))
    line = assert_one_line_error(status, err, "Read-only file system", "choose another --output")
    assert "--output-dir" not in line and not (finished / "eval.json").exists()
    options = {o for action in _eval_parser()._actions for o in action.option_strings}
    assert re.search(r"choose another (--[\w-]+)", line).group(1) in options


def _eval_parser():
    import argparse

    from norga.commands.cli import add_eval_arguments

    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    return parser


# ---- a failed run ----------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_a_failed_runs_metrics_describe_only_its_saved_tasks(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    for path in (run / "checkpoints").glob("task_02.pt*"):
        path.unlink()
    assert norga(["eval", "--run", str(run), "--output", str(tmp_path / "saved.json")]) == 0
    saved = json.loads((tmp_path / "saved.json").read_text())["method"]  # the method after tasks 0 and 1
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.lr=1e6", "--force"))
    assert_one_line_error(status, err, "training diverged in task 2", status=3)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["completed_tasks"] == 2
    assert len(metrics["method"]["diagnostics"]) == 2 and metrics["method"] == saved


# ---- norga list ------------------------------------------------------------------------------------------------
def test_list_describes_each_method_in_whole_sentences(capsys):
    from norga.methods import METHOD_CONFIGS

    assert norga(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    lines = lines[lines.index("methods (method.name):") + 1:]
    lines = lines[:next(i for i, line in enumerate(lines) if not line.startswith("  "))]
    assert len(lines) == len(METHOD_CONFIGS)
    for name, cls in METHOD_CONFIGS.items():
        [line] = [line for line in lines if line.startswith(f"  {name}: ")]
        text = line[len(f"  {name}: "):]
        paragraph = " ".join(cls.__doc__.strip().split("\n\n")[0].split()).replace("``", "")
        assert text.endswith(".") and paragraph.startswith(text), (name, text)
        rest = paragraph[len(text):]
        assert rest == "" or re.match(r"\s+[A-Z]", rest), (name, rest)  # cut only where a sentence ends


# ---- norga data prepare ------------------------------------------------------------------------------------------
def shipped_roots():
    """(config, benchmark, data.root) of every shipped benchmark config that reads a folder."""
    from norga.data.prepare import PREPARERS, get_preparer

    get_preparer("cifar100")  # registers the shipped preparers
    for path in sorted((REPO / "configs").glob("*.yaml")):
        cfg = load_config(path)
        if cfg.data.name in PREPARERS and not str(cfg.data.root).endswith(".npz"):
            yield path.name, cfg.data.name, cfg.data.root


def test_prepare_without_root_fills_the_folder_the_shipped_configs_read():
    from norga.data.prepare import PREPARERS

    found = list(shipped_roots())
    assert {bench for _, bench, _ in found} == set(PREPARERS) == {"cifar100", "imagenet_r", "cub200", "five_datasets",
                                                                   "imagenet_a", "objectnet", "omnibenchmark", "vtab"}
    for name, bench, root in found:
        assert PREPARERS[bench].root == root, (name, root)


def test_prepare_offline_without_root_prints_the_configs_layout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, out, err = cli(capsys, "data", "prepare", "cifar100", "--offline")
    config_root = load_config(REPO / "configs" / "cifar100_hideprompt.yaml").data.root
    assert status == 0, err
    assert f"{config_root}/cifar-100-python" in out


def test_a_failed_download_is_one_grammatical_line(tmp_path, monkeypatch, capsys):
    import norga.data.archives as archives

    def offline(urls, local, progress):
        raise OSError("network unreachable")

    monkeypatch.setattr(archives, "download", offline)
    status, _, err = cli(capsys, "data", "prepare", "cifar100", "--root", str(tmp_path), "--no-progress")
    line = assert_one_line_error(status, err, "cifar-100-python.tar.gz could not be downloaded (network unreachable)")
    assert " is could " not in line
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    status, _, err = cli(capsys, "data", "prepare", "cifar100", "--root", str(tmp_path), "--mirror", str(mirror))
    assert_one_line_error(status, err, f"is not in the mirror {mirror} and could not be downloaded")


# ---- norga doctor ------------------------------------------------------------------------------------------------
def _installed_by(command: str, versions: dict) -> dict:
    """The versions a ``pip install 'torch==2.5.*' 'torchvision==0.20.*'`` from PyPI leaves (default builds)."""
    pins = dict(re.findall(r"'(torch|torchvision)==([\d.]+)\.\*'", command))
    return {**versions, **{name: f"{series}.1" for name, series in pins.items()}}


@pytest.mark.parametrize("torch_v, vision_v", [("2.5.1+cpu", "0.20.1"), ("2.5.1+cu124", "0.19.0+cu124"),
                                               ("2.5.1+cpu", "0.21.0")])
def test_doctor_offers_a_pair_from_the_configured_index_that_satisfies_it(torch_v, vision_v):
    from norga.commands.environment import version_problems

    versions = {"torch": torch_v, "torchvision": vision_v, "timm": "1.0"}
    [problem] = version_problems(versions)
    assert "--index-url https://download.pytorch.org/whl/" in problem  # the build's own index, as before
    pair = re.search(r"configured index: (pip install [^;]*)$", problem).group(1)
    assert "--index-url" not in pair and "'torch==2.5.*'" in pair and "'torchvision==0.20.*'" in pair
    assert version_problems(_installed_by(pair, versions)) == []  # following it ends the loop


def test_doctor_needs_no_second_command_for_a_default_build():
    from norga.commands.environment import version_problems

    [problem] = version_problems({"torch": "2.5.1", "torchvision": "0.19.0", "timm": "1.0"})
    assert problem.endswith("pip install --force-reinstall --no-deps 'torchvision==0.20.*'")


# ---- issue #66: messages that misled ------------------------------------------------------------------------------
def test_a_dry_run_on_a_gpu_that_is_not_there_fails(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    status, out, err = cli(capsys, "train", *train_args(tmp_path / "run", "--set", "device=cuda", "--dry-run", "quick"))
    assert_one_line_error(status, err, "device: 'cuda' requested but CUDA is not available", "device=cpu")
    assert "dry run OK" not in out and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, option", [(["train", "--config", "smoke", "--output-dir", ""], "--output-dir"),
                                          (["eval", "--run", "runs/x", "--output", ""], "--output")])
def test_an_empty_output_option_is_named_not_blamed_on_dot(argv, option, capsys):
    with pytest.raises(SystemExit) as done:
        norga(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and f"argument {option}: " in err and "must not be empty" in err
    assert "Traceback" not in err and " . " not in err


def test_an_empty_config_is_named(capsys):
    status, _, err = cli(capsys, "train", "--config", "")
    line = assert_one_line_error(status, err, "--config is empty", "norga configs lists them")
    assert "folder" not in line and " . " not in line


def test_eval_of_a_file_says_it_is_a_file_not_a_run_folder(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text("{}")
    status, _, err = cli(capsys, "eval", "--run", str(tmp_path / "metrics.json"))
    line = assert_one_line_error(status, err, "is a file, not a run folder", "--output-dir")
    assert "not found" not in line


def test_a_foreign_norga_run_json_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "norga-run.json").write_text(json.dumps({"name": "my web app", "version": 3}))
    before = (run / "norga-run.json").read_bytes()
    for command in ("eval", "routes", "export"):
        extra = ["--out", str(tmp_path / "export")] if command == "export" else []
        status, _, err = cli(capsys, command, "--run", str(run), *extra)
        line = assert_one_line_error(status, err, f"{run / 'norga-run.json'} is not norga's run marker")
        assert "no norga-run.json" not in line and "checkpoint" not in line
    assert (run / "norga-run.json").read_bytes() == before and not (tmp_path / "export").exists()


def test_tensorboard_missing_names_its_own_fix(tmp_path, monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else
                        find_spec(name, *a))
    status, _, err = cli(capsys, "train", *train_args(tmp_path / "run", "--set", "logging.tensorboard=true"))
    line = assert_one_line_error(status, err, 'pip install "norga[tensorboard]"', "set logging.tensorboard=false")
    assert "logging.trackers" not in line and not (tmp_path / "run").exists()


def test_a_shipped_name_beside_a_local_file_says_which_file_was_read(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke.yaml").write_text("base: nowhere.yaml\n")
    (tmp_path / "taken").write_text("a file where the run folder would go\n")
    status, _, err = cli(capsys, "train", "--config", "smoke", "--output-dir", "taken")
    assert_one_line_error(status, err, "taken exists and is not a folder")  # the shipped smoke was read
    [note] = [line for line in err.splitlines() if line.startswith("note:")]
    assert "reads the shipped config" in note and "--config smoke.yaml" in note
    status, _, err = cli(capsys, "train", "--config", "smoke.yaml", "--output-dir", "taken")
    assert_one_line_error(status, err, "base config not found")  # the local file, as asked
    assert "note:" not in err


@pytest.mark.integration
def test_summarize_refuses_the_same_runs_on_both_sides(finished, tmp_path, capsys):
    status, out, err = cli(capsys, "summarize", str(finished), "--vs", str(finished))
    assert_one_line_error(status, err, "--vs names run folders of the first group too", str(finished))
    assert out == ""
