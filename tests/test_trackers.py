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


def _no_mlflow_env(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)  # restored (removed) after the test, also if norga set it


def test_mlflow_needs_no_configuration_and_resumes_in_the_run_folder(tmp_path, monkeypatch):
    """No MLFLOW_TRACKING_URI, no MLFLOW_ALLOW_FILE_STORE: the run logs into DIR/mlruns (said in log.txt), writes
    nothing in the working directory, and a resumed copy continues the same MLflow run in its own mlruns/."""
    mlflow = pytest.importorskip("mlflow")
    from norga.commands.cli import main as norga

    _no_mlflow_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert norga(["train", *train_args(run), "--set", "logging.trackers=[mlflow]"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no ./mlruns, no ./mlflow.db
    assert f"mlflow: no MLFLOW_TRACKING_URI: logging to the file store {run.resolve() / 'mlruns'}" in (
        run / "log.txt").read_text()
    run_id = json.loads((run / "trackers.json").read_text())["mlflow"]["run_id"]
    client = mlflow.MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    assert client.get_run(run_id).info.status == "FINISHED"
    assert client.get_experiment_by_name("norga") is not None

    resumed = copy_run(run, tmp_path / "resumed", tasks=2)
    assert norga(["train", *train_args(resumed), "--set", "logging.trackers=[mlflow]"]) == 0
    client = mlflow.MlflowClient(tracking_uri=(resumed / "mlruns").resolve().as_uri())
    assert sorted(m.step for m in client.get_metric_history(run_id, "acc_row.task_00")) == [0, 1, 2, 2]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: connections are refused


def test_unreachable_mlflow_server_is_one_line_at_once(monkeypatch):
    """A closed loopback port fails before anything is built, in one line naming the URI, the timeout and both
    ways out (instead of MLflow's minutes of retries)."""
    import time

    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{_closed_port()}"
    _no_mlflow_env(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        check_trackers(["mlflow"])
    message = str(err.value)
    assert time.monotonic() - start < 5.0 and "\n" not in message
    for part in (f"MLFLOW_TRACKING_URI={uri} ", "within 5 s", "unset MLFLOW_TRACKING_URI", "remove mlflow"):
        assert part in message


def test_reachability_check_listens_for_the_server_or_its_proxy(monkeypatch):
    """A listening port passes; with a proxy set the proxy is what must answer; a timeout says so."""
    import socket

    from norga.toolkit.trackers.mlflow import unreachable

    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    closed = f"http://127.0.0.1:{_closed_port()}"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert unreachable(f"http://127.0.0.1:{port}/") is None
        assert "Connection refused" in unreachable(closed)
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
        assert unreachable(closed) is None  # the proxy answers for it
    monkeypatch.delenv("http_proxy")

    def silent(*args, **kwargs):
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    assert "within 0.5 s (no answer)" in unreachable(closed, timeout=0.5)


def test_database_store_without_sqlalchemy_is_one_line(monkeypatch):
    import importlib.util

    pytest.importorskip("mlflow")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    with pytest.raises(ConfigError, match="pip install mlflow.*unset MLFLOW_TRACKING_URI"):
        check_trackers(["mlflow"])


def test_resuming_from_a_store_without_the_run_is_one_line(tmp_path, monkeypatch):
    """trackers.json names an MLflow run the store in use does not hold (e.g. the run started on a server)."""
    pytest.importorskip("mlflow")
    _no_mlflow_env(monkeypatch)
    (tmp_path / "trackers.json").write_text(json.dumps({"mlflow": {"run_id": "0" * 32}}))
    with pytest.raises(ConfigError) as err:
        trackers_mod.open_trackers(tmp_path, ["mlflow"], {})
    assert "\n" not in str(err.value)
    for part in ("0" * 32, "is not in file://", "set MLFLOW_TRACKING_URI to the store the run started in"):
        assert part in str(err.value)
