"""A run folder says what it is (issue #32): the config history under --force, failed and interrupted runs.

Repro commands of the issue as tests: a partial run continued with ``--force`` and a changed config, a finished
run given a new config with ``--force``, and a run diverged by a huge learning rate (``method.wtp.lr=1e6``).
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from faults import assert_one_line_error, train_args
from norga.commands.cli import main as norga
from norga.errors import DIVERGED_EXIT
from norga.engine.evaluate import TaskEvaluation
from norga.engine.lifecycle import diverged_to_chance
from norga.engine.provenance import changed_values, config_hash, config_history
from norga.toolkit.loss_watch import EpochLoss, exploded

pytestmark = pytest.mark.integration  # trains whole (tiny) runs


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("status") / "run"
    assert norga(["train", *train_args(out)]) == 0
    return out


def cli(capsys, *argv: str):
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def metrics_of(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def partial_copy(source: Path, dest: Path) -> Path:
    """``source`` without its last task (checkpoint and checksum)."""
    shutil.copytree(source, dest)
    for path in (dest / "checkpoints").glob("task_02.pt*"):
        path.unlink()
    return dest


def test_a_finished_run_is_complete_with_one_config(finished):
    metrics = metrics_of(finished)
    assert metrics["status"] == "complete" and metrics["mixed_config"] is False
    assert metrics["config_history"] == [{"tasks": [0, 2], "config_hash": metrics["config_history"][0]["config_hash"]}]
    import yaml

    assert metrics["config_history"][0]["config_hash"] == config_hash(
        yaml.safe_load((finished / "config.yaml").read_text()))


def test_force_on_a_partial_run_records_the_history_and_summarize_refuses_to_pool_it(finished, tmp_path, capsys):
    run = partial_copy(finished, tmp_path / "run")
    old_hash = metrics_of(finished)["config_history"][0]["config_hash"]
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.epochs=1"))
    assert_one_line_error(status, err, "different config (changed: ['method.wtp.epochs'])", "--force to train task 2")
    status, out, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.epochs=1", "--force"))
    assert status == 0, err[-2000:]
    assert "tasks trained with different configs" in out
    metrics = metrics_of(run)
    assert metrics["status"] == "complete" and metrics["mixed_config"] is True
    first, second = metrics["config_history"]
    assert first == {"tasks": [0, 1], "config_hash": old_hash}
    assert second["tasks"] == [2, 2] and second["changed"] == {"method.wtp.epochs": [2, 1]}
    assert second["config_hash"] != old_hash
    log = (run / "log.txt").read_text()
    assert "warning: --force: tasks 0-1 trained with the previous config" in log and "method.wtp.epochs: 2 -> 1" in log
    assert (run / "config.yaml").read_text().startswith("# tasks 0-1 of this run were trained with other configs")

    status, _, err = cli(capsys, "summarize", str(run))
    assert_one_line_error(status, err, "trained with different configs across its tasks", "--allow-mixed")
    status, out, err = cli(capsys, "summarize", str(run), "--allow-mixed")
    assert status == 0, err


def test_force_on_a_finished_run_with_a_new_config_retrains_nothing_and_says_so(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = {p.name: p.read_bytes()
              for p in [*(run / "checkpoints").iterdir(), run / "config.yaml", run / "metrics.json"]}
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.epochs=1", "--force"))
    assert_one_line_error(status, err, "all 3 tasks are already trained with another config", "nothing was retrained",
                          "use a new --output-dir")
    after = {p.name: p.read_bytes()
             for p in [*(run / "checkpoints").iterdir(), run / "config.yaml", run / "metrics.json"]}
    assert after == before


def test_a_diverged_run_is_failed_exits_3_and_summarize_excludes_it(tmp_path, capsys):
    run = tmp_path / "run"
    status, _, err = cli(capsys, "train", *train_args(run, "--set", "method.wtp.lr=1e6"))
    line = assert_one_line_error(status, err, "training diverged in task 0", "stage wtp", "chance level",
                                 "lower method.wtp.lr", status=DIVERGED_EXIT)
    assert "run complete" not in err
    metrics = metrics_of(run)
    assert metrics["status"] == "failed" and metrics["completed_tasks"] == 0
    assert metrics["stopped"]["task"] == 0 and metrics["stopped"]["reason"] in line
    assert "FA" not in metrics and not (run / "checkpoints" / "task_00.pt").exists()
    assert "run failed in task 0" in (run / "log.txt").read_text()
    status, _, err = cli(capsys, "summarize", str(run))
    assert_one_line_error(status, err, "failed in task 0: training diverged")


# ---- the rules, by hand ---------------------------------------------------------------------------
def _evaluation(til: float) -> TaskEvaluation:
    return TaskEvaluation(cil_accuracy=til, til_accuracy=til, cil_unmasked_accuracy=til, tii_accuracy=None,
                          tii_predicted=())


def test_divergence_needs_both_chance_accuracy_and_an_exploded_loss():
    limit = 100 * math.log(10)  # 230.26 nats for 10 classes
    below, above = [EpochLoss("wtp", 0, 230.0, "method.wtp.lr")], [EpochLoss("wtp", 0, 231.0, "method.wtp.lr")]
    assert exploded(below, 10) is None and exploded(above, 10) == above[0] and 230.0 < limit < 231.0
    assert exploded([EpochLoss("tii", 1, math.nan)], 10).stage == "tii"
    chance = _evaluation(0.19)  # chance 0.1 + a tenth of the way to 1.0 = 0.19: still at chance
    learned = _evaluation(0.20)
    reason = diverged_to_chance(4, chance, 10, above)
    assert reason.startswith("training diverged in task 4: the loss of stage wtp reached 231 in epoch 0")
    assert "lower method.wtp.lr" in reason
    assert diverged_to_chance(4, chance, 10, below) is None  # no signal in the data, but no divergence
    assert diverged_to_chance(4, learned, 10, above) is None  # exploded but learned: not failed


def test_config_hash_ignores_only_the_neutral_sections():
    cfg = {"seed": 1, "method": {"wtp": {"epochs": 3}}, "logging": {"tensorboard": False}}
    assert config_hash(cfg) == config_hash({**cfg, "logging": {"tensorboard": True}})
    assert config_hash(cfg) != config_hash({**cfg, "seed": 2})
    assert changed_values(cfg, {**cfg, "method": {"wtp": {"epochs": 1}}}) == {"method.wtp.epochs": [3, 1]}


def test_config_history_groups_consecutive_tasks_with_their_changes():
    a = {"seed": 1, "method": {"name": "norga", "wtp": {"epochs": 3}}}
    b = {"seed": 1, "method": {"name": "norga", "wtp": {"epochs": 1}}}
    history = config_history([a, a, b, b, a])
    assert [h["tasks"] for h in history] == [[0, 1], [2, 3], [4, 4]]
    assert [h.get("changed") for h in history] == [None, {"method.wtp.epochs": [3, 1]}, {"method.wtp.epochs": [1, 3]}]
    assert history[0]["config_hash"] == history[2]["config_hash"] != history[1]["config_hash"]
