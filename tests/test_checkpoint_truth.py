"""Checkpoints are the truth (issue #66): metrics.json, checksums, backbone weights and data split are checked
against what the checkpoints record, through the CLI.

Repro cases of the issue: a deleted ``task_XX.pt.sha256``, an edited ``metrics.json``, backbone weights changed
behind the same path between tasks, a data split that changed before a resume. Where a command must refuse, the
run folder is byte-for-byte unchanged and the error is one line.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import SHORT_SMOKE, SMOKE, tiny_vit
from faults import assert_one_line_error
from norga.commands.cli import main as norga
from norga.engine import task_loop
from norga.engine.run_folder import RunDir

pytestmark = pytest.mark.integration  # trains two short smoke runs


def train_args(out: Path, *extra: str) -> list:
    sets = [arg for override in SHORT_SMOKE for arg in ("--set", override)]
    return ["--config", str(SMOKE), "--output-dir", str(out), *sets, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("truth") / "run"
    assert norga(["train", *train_args(out)]) == 0
    return out


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """(a finished run whose backbone weights come from a local file, that file)."""
    folder = tmp_path_factory.mktemp("weighted")
    weights = folder / "vit.pth"
    torch.save(tiny_vit(0).state_dict(), weights)
    out = folder / "run"
    assert norga(["train", *train_args(out, "--set", f"model.checkpoint={weights}")]) == 0
    return out, weights


def cli(capsys, *argv: str):
    status = norga([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def tree(folder: Path) -> dict:
    """relative path -> sha256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def metrics_of(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def without_last_task(source: Path, dest: Path) -> Path:
    """A copy of the finished 2-task run ``source`` with task 1's checkpoint and checksum removed."""
    shutil.copytree(source, dest)
    for path in (dest / "checkpoints").glob("task_01.pt*"):
        path.unlink()
    return dest


def test_a_missing_checksum_is_an_error_for_every_reader_and_train_redoes_the_task(finished, tmp_path, capsys):
    run = shutil.copytree(finished, tmp_path / "run")
    (run / "checkpoints" / "task_01.pt.sha256").unlink()
    before = tree(run)
    for argv in (["eval", "--run", run], ["export", "--run", run, "--out", tmp_path / "export"],
                 ["summarize", run]):
        status, _, err = cli(capsys, *argv)
        assert_one_line_error(status, err, "checkpoints/task_01.pt (task 1) has no checksum file",
                              "'norga train' on this folder trains")
        assert tree(run) == before, argv  # nothing evaluated from fewer tasks, nothing written
    assert not (tmp_path / "export").exists()
    status, _, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    assert (run / "checkpoints" / "task_01.pt.sha256").is_file()
    assert metrics_of(run)["acc_matrix"] == metrics_of(finished)["acc_matrix"]


def test_an_edited_metrics_json_is_refused_by_readers_and_rebuilt_by_train(finished, tmp_path, capsys):
    run = shutil.copytree(finished, tmp_path / "run")
    true_fa = metrics_of(finished)["FA"]
    edited = {**metrics_of(run), "FA": 0.5}
    (run / "metrics.json").write_text(json.dumps(edited, indent=2))
    before = tree(run)
    for argv in (["summarize", run], ["export", "--run", run, "--out", tmp_path / "export"]):
        status, _, err = cli(capsys, *argv)
        assert_one_line_error(status, err, f"{run / 'metrics.json'} disagrees with the evaluation rows",
                              "FA: 0.5 in metrics.json", "re-run the norga train command")
        assert tree(run) == before, argv
    status, out, err = cli(capsys, "train", *train_args(run))
    assert status == 0, err[-2000:]
    assert f"run complete: FA {true_fa:.4f}" in out and "FA 0.5000" not in out
    assert metrics_of(run)["FA"] == true_fa
    assert "warning: metrics.json disagrees with the evaluation rows" in (run / "log.txt").read_text()
    status, out, err = cli(capsys, "summarize", run)
    assert status == 0, err[-2000:]


def test_every_value_and_task_count_of_metrics_json_is_checked(finished, tmp_path):
    from norga.errors import RunError

    run = shutil.copytree(finished, tmp_path / "run")
    assert RunDir(run).read_metrics() == metrics_of(finished)  # an untouched run reads as it is
    cell = metrics_of(run)
    cell["acc_matrix"][0][1] = 0.25
    (run / "metrics.json").write_text(json.dumps(cell))
    with pytest.raises(RunError, match=r"acc_matrix\[0\]\[1\]: 0.25 in metrics.json"):
        RunDir(run).read_metrics()
    stale = {**metrics_of(finished), "completed_tasks": 1}  # behind its checkpoints
    (run / "metrics.json").write_text(json.dumps(stale))
    with pytest.raises(RunError, match="counts 1 completed tasks but checkpoints/task_01.pt exists too"):
        RunDir(run).read_metrics()
    ahead = {**metrics_of(finished)}
    (run / "metrics.json").write_text(json.dumps(ahead))
    (run / "checkpoints" / "task_01.pt").unlink()
    with pytest.raises(RunError, match="task_01.pt is missing"):
        RunDir(run).read_metrics()


def test_backbone_weights_changed_behind_the_same_path(weighted, tmp_path, capsys):
    finished_run, weights = weighted
    original = weights.read_bytes()
    old = hashlib.sha256(original).hexdigest()[:16]
    recorded = metrics_of(finished_run)
    assert recorded["backbone"]["checkpoint_sha256_16"] == old and recorded["mixed_inputs"] is False
    assert recorded["inputs_history"] == [{"tasks": [0, 1], "backbone_sha256_16": old, "split_sha256": None}]
    assert RunDir(finished_run).load_checkpoint(0)["inputs"]["backbone_sha256_16"] == old
    partial = without_last_task(finished_run, tmp_path / "partial")
    full = shutil.copytree(finished_run, tmp_path / "full")
    try:
        torch.save(tiny_vit(1).state_dict(), weights)  # other weights, same path
        new = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
        before = tree(partial)
        args = train_args(partial, "--set", f"model.checkpoint={weights}")
        status, _, err = cli(capsys, "train", *args)
        assert_one_line_error(status, err, f"the backbone weights {weights} changed since task 0", old, new,
                              "--force")
        assert tree(partial) == before
        status, _, err = cli(capsys, "eval", "--run", full)
        assert_one_line_error(status, err, f"the backbone weights {weights} changed since task 0", old, new)
        assert not (full / "eval.json").exists()

        status, _, err = cli(capsys, "train", *args, "--force")
        assert status == 0, err[-2000:]
        metrics = metrics_of(partial)
        assert metrics["mixed_inputs"] is True and metrics["backbone"]["checkpoint_sha256_16"] == new
        assert [h["tasks"] for h in metrics["inputs_history"]] == [[0, 0], [1, 1]]
        assert metrics["inputs_history"][1]["changed"] == {"backbone_sha256_16": [old, new]}
        assert "warning: --force: the backbone weights" in (partial / "log.txt").read_text()
        status, _, err = cli(capsys, "summarize", partial)
        assert_one_line_error(status, err, "trained on different inputs across its tasks", "--allow-mixed")
    finally:
        weights.write_bytes(original)


def test_a_changed_data_split_stops_a_resume_or_is_recorded_with_force(finished, tmp_path, capsys, monkeypatch):
    run = without_last_task(finished, tmp_path / "run")
    first, now = "a" * 64, "b" * 64
    saved = RunDir(run).load_checkpoint(0)
    saved["inputs"] = {**saved.get("inputs", {}), "split_sha256": first}  # task 0 trained on split `first`
    RunDir(run).save_checkpoint(0, saved)
    build_data = task_loop.build_data

    def data_with_split(cfg, vit):  # the data now lists other images (e.g. an unreadable one deleted)
        bench = build_data(cfg, vit)
        info = bench.info
        bench.info = lambda: {**info(), "split_sha256": now}
        return bench

    monkeypatch.setattr(task_loop, "build_data", data_with_split)
    before = tree(run)
    status, _, err = cli(capsys, "train", *train_args(run))
    assert_one_line_error(status, err, "the data split", "changed since task 0", first[:16], now[:16], "--force")
    assert tree(run) == before
    status, _, err = cli(capsys, "train", *train_args(run, "--force"))
    assert status == 0, err[-2000:]
    metrics = metrics_of(run)
    assert metrics["mixed_inputs"] is True
    assert metrics["inputs_history"][1]["changed"] == {"split_sha256": [first, now]}
    assert "warning: --force: the data split" in (run / "log.txt").read_text()
