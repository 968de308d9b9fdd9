"""Per-epoch JSON-lines log: keys, no-op without a log, resume, TensorBoard, ETA line, config key."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from norga.config import ConfigError, load_config
from norga.toolkit.epochlog import (FILENAME, TensorBoardMissing, current_log, epoch_log, log_epoch,
                                      progress_line, read_epoch_log)

STAGES = ("tii", "wtp")


def _fill(tasks, epochs=3):
    """What the stages do: one log_epoch call per epoch per stage."""
    for t in tasks:
        for stage in STAGES:
            for e in range(epochs):
                log_epoch(stage=stage, task=t, epoch=e, lr=[0.01, 0.001], loss=torch.tensor(1.0 / (e + 1)),
                          ce=np.float32(0.5), reg=0.25 if stage == "wtp" else None,
                          alpha=torch.tensor([1.0, 2.0]), tau=[torch.tensor(0.5), 1.5])


def test_log_epoch_is_a_noop_without_an_open_log(tmp_path):
    assert current_log() is None
    assert log_epoch(stage="wtp", task=0, epoch=0, loss=1.0) is None
    assert list(tmp_path.iterdir()) == []


def test_one_line_per_epoch_per_stage_with_the_documented_keys(tmp_path):
    with epoch_log(tmp_path) as log:
        assert current_log() is log
        _fill(tasks=(0, 1))
    assert current_log() is None and log_epoch(stage="wtp", task=0, epoch=0) is None  # closed again
    lines = (tmp_path / FILENAME).read_text().splitlines()
    assert len(lines) == 2 * len(STAGES) * 3
    records = [json.loads(line) for line in lines]
    assert [(r["task"], r["stage"], r["epoch"]) for r in records] == \
        [(t, s, e) for t in (0, 1) for s in STAGES for e in range(3)]
    first = records[0]
    assert set(first) == {"stage", "task", "epoch", "elapsed", "time", "lr", "loss", "ce", "alpha", "tau"}
    assert "reg" in records[3] and "reg" not in records[0]  # None values are left out
    assert first["loss"] == 1.0 and records[2]["loss"] == pytest.approx(1 / 3)
    assert first["lr"] == [0.01, 0.001] and first["alpha"] == [1.0, 2.0] and first["tau"] == [0.5, 1.5]
    assert first["ce"] == 0.5 and isinstance(first["task"], int)
    elapsed = [r["elapsed"] for r in records]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0.0
    assert read_epoch_log(tmp_path) == records


def test_resume_drops_unfinished_tasks_and_a_truncated_line(tmp_path):
    with epoch_log(tmp_path):
        _fill(tasks=(0, 1))
    with open(tmp_path / FILENAME, "a") as f:
        f.write('{"stage": "wtp", "task": 1, "ep')  # killed while writing
    with epoch_log(tmp_path, completed_tasks=1):  # task 0 finished, task 1 is redone
        assert [r["task"] for r in read_epoch_log(tmp_path)] == [0] * (len(STAGES) * 3)
        _fill(tasks=(1, 2))
    records = read_epoch_log(tmp_path)
    assert [r["task"] for r in records] == [0] * 6 + [1] * 6 + [2] * 6
    assert len((tmp_path / FILENAME).read_text().splitlines()) == 18


def test_nested_logs_restore_the_outer_one(tmp_path):
    with epoch_log(tmp_path / "outer") as outer:
        with epoch_log(tmp_path / "inner"):
            log_epoch(stage="tap", task=0, epoch=0, loss=1.0)
        assert current_log() is outer
        log_epoch(stage="tap", task=0, epoch=1, loss=2.0)
    assert [r["epoch"] for r in read_epoch_log(tmp_path / "inner")] == [0]
    assert [r["epoch"] for r in read_epoch_log(tmp_path / "outer")] == [1]


def test_tensorboard_scalars_per_stage(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with epoch_log(tmp_path, tensorboard=True):
        _fill(tasks=(0, 1), epochs=2)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"wtp/loss", "wtp/reg", "tii/loss", "wtp/alpha/0", "wtp/alpha/1", "wtp/lr/1"} <= tags
    steps = [(s.step, s.value) for s in events.Scalars("wtp/loss")]
    assert steps == [(0, 1.0), (1, 0.5), (2, 1.0), (3, 0.5)]  # the stage's epochs counted over tasks


def test_missing_tensorboard_is_a_clear_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # makes the import fail
    with pytest.raises(TensorBoardMissing, match="pip install tensorboard") as err:
        with epoch_log(tmp_path, tensorboard=True):
            pass
    assert isinstance(err.value, ConfigError)
    assert current_log() is None


def test_progress_line_eta_by_hand():
    assert progress_line([60.0, 120.0], 5) == \
        "progress: 2/5 tasks done (40%), 3m00s spent, 1m30s/task, ETA 4m30s"
    assert progress_line([3000.0, 4000.0], 2).endswith("1h56m spent, 58m20s/task, finished")
    assert progress_line([], 3) == "progress: 0/3 tasks done"


def test_logging_section_in_the_config():
    assert load_config(None).logging.tensorboard is False
    assert load_config(None, ["logging.tensorboard=true"]).logging.tensorboard is True
    with pytest.raises(ConfigError, match="logging.tensorboard"):
        load_config(None, ["logging.tensorboard=1"])
    with pytest.raises(ConfigError, match="logging.tb"):
        load_config(None, ["logging.tb=true"])
