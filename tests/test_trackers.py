"""logging.trackers: config, one-line problems, and real offline W&B / file-store MLflow runs (with a resume)."""
import json
import sys
from pathlib import Path

import pytest

from norga.config import ConfigError, config_to_dict, load_config
from norga.toolkit import trackers as trackers_mod
from norga.toolkit.trackers import check_trackers, tracker_names

sys.path.insert(0, str(Path(__file__).parent))
from faults import copy_run, train_args  # noqa: E402

SMOKE_CFG = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


def _cfg(*overrides):
    return load_config(str(SMOKE_CFG), list(overrides))


def test_no_tracker_leaves_config_dict_unchanged():
    data = config_to_dict(_cfg())
    assert "trackers" not in data["logging"]
    assert config_to_dict(_cfg("logging.trackers=[wandb]"))["logging"]["trackers"] == ["wandb"]


def test_unknown_or_repeated_tracker_is_one_config_error():
    with pytest.raises(ConfigError, match="logging.trackers"):
        _cfg("logging.trackers=[neptune]")
    with pytest.raises(ConfigError, match="twice"):
        _cfg("logging.trackers=[wandb,wandb]")


def test_tensorboard_key_is_an_alias():
    assert tracker_names(_cfg("logging.tensorboard=true").logging) == ["tensorboard"]
    assert tracker_names(_cfg("logging.tensorboard=true", "logging.trackers=[mlflow]").logging) == ["tensorboard",
                                                                                                   "mlflow"]


def test_missing_package_is_one_line(monkeypatch):
    monkeypatch.setattr(trackers_mod.TRACKERS["mlflow"], "package", "norga_absent_package_xyz")
    with pytest.raises(ConfigError) as err:
        check_trackers(["mlflow"])
    assert "\n" not in str(err.value) and "norga[mlflow]" in str(err.value)


def test_wandb_without_login_is_one_line(monkeypatch):
    wandb = pytest.importorskip("wandb")
    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(type(wandb.api), "api_key", property(lambda self: None))
    with pytest.raises(ConfigError, match="wandb login"):
        check_trackers(["wandb"])


def _train(out: Path) -> int:
    from norga.commands.cli import main as norga

    return norga(["train", *train_args(out), "--set", "logging.trackers=[wandb,mlflow]"])


def test_offline_wandb_and_file_mlflow_runs_resume(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}/mlruns")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store unless told
    assert _train(tmp_path / "run") == 0
    ids = json.loads((tmp_path / "run" / "trackers.json").read_text())
    fa = json.loads((tmp_path / "run" / "metrics.json").read_text())["FA"]

    client = mlflow.MlflowClient()
    run = client.get_run(ids["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["norga.status"] == "complete"
    assert run.data.metrics["final.FA"] == pytest.approx(fa)
    assert "config.json" in [a.path for a in client.list_artifacts(run.info.run_id)]
    rows = client.get_metric_history(run.info.run_id, "acc_row.task_00")
    assert [m.step for m in rows] == [0, 1, 2]

    (run_file,) = (tmp_path / "wandb").glob(f"offline-run-*/run-{ids['wandb']['run_id']}.wandb")
    data = run_file.read_bytes()
    for needle in (b"final/FA", b"complete", b"acc_row/task_02", b"running/FA", b"wtp/loss", b"classes_per_task"):
        assert needle in data

    resumed = copy_run(tmp_path / "run", tmp_path / "resumed", tasks=1)
    assert _train(resumed) == 0
    assert json.loads((resumed / "trackers.json").read_text()) == ids  # the same tracker runs continued
    rows = client.get_metric_history(ids["mlflow"]["run_id"], "acc_row.task_00")
    assert sorted(m.step for m in rows) == [0, 1, 1, 2, 2]  # tasks 1 and 2 logged again by the resumed session
    assert client.get_run(ids["mlflow"]["run_id"]).info.status == "FINISHED"
    assert len(list((tmp_path / "wandb").glob(f"offline-run-*/run-{ids['wandb']['run_id']}.wandb"))) == 2


def test_interrupted_run_ends_the_mlflow_run_killed(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from norga.commands.cli import main as norga
    from norga.engine import task_loop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}/mlruns")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    real_task = task_loop._train_task

    def stop_in_task_1(t, *args):
        if t == 1:
            raise KeyboardInterrupt
        real_task(t, *args)

    monkeypatch.setattr(task_loop, "_train_task", stop_in_task_1)
    norga(["train", *train_args(tmp_path / "run"), "--set", "logging.trackers=[mlflow]"])
    run_id = json.loads((tmp_path / "run" / "trackers.json").read_text())["mlflow"]["run_id"]
    run = mlflow.MlflowClient().get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["norga.status"] == "interrupted"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "interrupted"
