"""MLflow tracker (``pip install "norga[mlflow]"``, i.e. mlflow-skinny): works with no configuration.

The store is ``MLFLOW_TRACKING_URI`` when set; otherwise a local file store inside the run folder, ``DIR/mlruns``
(:data:`RUN_STORE`). MLflow 3 refuses file stores unless ``MLFLOW_ALLOW_FILE_STORE`` is true, and its default
(``sqlite:///mlflow.db``) needs packages mlflow-skinny lacks, so for a file store norga sets
``MLFLOW_ALLOW_FILE_STORE=true`` in its own process (unless it is set already). An http(s) URI must accept a
connection within :data:`REACH_TIMEOUT` seconds before training starts (MLflow itself retries for minutes);
a database URI without SQLAlchemy installed is refused by name. The experiment is ``MLFLOW_EXPERIMENT_NAME``
(default ``norga``); a resumed run continues the MLflow run whose id is kept in ``trackers.json``.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import urllib.request
from pathlib import Path
from typing import Dict, Optional, Tuple
from urllib.parse import urlsplit

from .base import Tracker, register_tracker

STATUS = {"complete": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
RUN_STORE = "mlruns"  # DIR/mlruns: the store when MLFLOW_TRACKING_URI is not set (a folder the run folder owns)
REACH_TIMEOUT = 5.0  # seconds an http(s) tracking server (or its proxy) has to accept a TCP connection
DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's database stores: need SQLAlchemy (full mlflow)
WAYS_OUT = ("unset MLFLOW_TRACKING_URI to log into the run folder's mlruns/ (no server needed), "
            "or remove mlflow from logging.trackers")


def tracking_uri(run_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI``, or the file URI of ``run_dir/mlruns`` when it is unset or empty."""
    return os.environ.get("MLFLOW_TRACKING_URI") or (Path(run_dir).resolve() / RUN_STORE).as_uri()


def is_file_store(uri: str) -> bool:
    """True for a ``file:`` URI or a plain path (MLflow's file store)."""
    return urlsplit(uri).scheme in ("", "file")


def _endpoint(uri: str) -> Tuple[str, int]:
    """(host, port) a connection to the http(s) ``uri`` goes to first: its proxy when one applies."""
    parts = urlsplit(uri)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def unreachable(uri: str, timeout: float = REACH_TIMEOUT) -> Optional[str]:
    """None when the http(s) server of ``uri`` accepts a TCP connection within ``timeout`` s, else one line."""
    try:
        with socket.create_connection(_endpoint(uri), timeout=timeout):
            return None
    except (OSError, ValueError) as err:  # refused, timed out, unknown host, a bad port
        why = "no answer" if isinstance(err, socket.timeout) else (err.strerror or str(err) or type(err).__name__)
        return (f"MLFLOW_TRACKING_URI={uri} did not accept a connection within {timeout:g} s ({why}): "
                f"start the server or correct the URI, or {WAYS_OUT}")


@register_tracker
class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"
    extra = "mlflow"

    @classmethod
    def problem(cls) -> Optional[str]:
        """The package, then the store of ``MLFLOW_TRACKING_URI``: an http(s) server must answer, a database
        store needs SQLAlchemy. No URI (the run folder's file store) needs nothing more."""
        missing = super().problem()
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        scheme = urlsplit(uri).scheme.split("+")[0].lower()
        if missing or not uri:
            return missing
        if scheme in ("http", "https"):
            return unreachable(uri)
        if scheme in DB_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
            return (f"MLFLOW_TRACKING_URI={uri} is a database store, which needs the full MLflow "
                    f"(pip install mlflow; norga[mlflow] installs mlflow-skinny): install it, or {WAYS_OUT}")
        return None

    def __init__(self, run_dir: Path, config: dict, resume: dict):
        super().__init__(run_dir, config, resume)
        self._mlflow = importlib.import_module("mlflow")
        uri = tracking_uri(run_dir)
        if is_file_store(uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores otherwise
        client = self._mlflow.MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "norga")
        if resume.get("run_id"):
            self._run_id = resume["run_id"]
            _reopen(client, self._run_id, uri)
        else:
            experiment = client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
            self._run_id = client.create_run(experiment_id, run_name=Path(run_dir).resolve().name).info.run_id
            client.log_text(self._run_id, json.dumps(config, indent=2, default=str), "config.json")
        self._client = client
        self.where = _where(uri, run_dir, self._run_id)

    def state(self) -> dict:
        return {"run_id": self._run_id}

    def scalars(self, values: Dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self._client.log_metric(self._run_id, tag.replace("/", "."), float(value), step=step)

    def finish(self, final: Dict[str, float], status: str) -> None:
        for key, value in final.items():
            self._client.log_metric(self._run_id, f"final.{key}", float(value))
        self._client.set_tag(self._run_id, "norga.status", status)
        self._client.set_terminated(self._run_id, status=STATUS.get(status, "FAILED"))

    def close(self) -> None:
        self._client.set_terminated(self._run_id, status="KILLED")


def _reopen(client, run_id: str, uri: str) -> None:
    """Mark the MLflow run of an earlier session RUNNING again; one line when ``uri`` does not hold it."""
    try:
        client.update_run(run_id, status="RUNNING")
    except Exception as err:  # noqa: BLE001 - MLflow raises its own exception types
        raise RuntimeError(f"MLflow run {run_id} (kept in trackers.json) is not in {uri} "
                           f"({type(err).__name__}): set MLFLOW_TRACKING_URI to the store the run started "
                           "in") from err


def _where(uri: str, run_dir: Path, run_id: str) -> str:
    """The line the run's log gets: where the MLflow run is and, for the run folder's store, how to view it."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return f"logging to MLFLOW_TRACKING_URI={uri}, run {run_id}"
    store = Path(run_dir).resolve() / RUN_STORE
    return (f"no MLFLOW_TRACKING_URI: logging to the file store {store}, run {run_id} (view it with "
            f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}; the UI needs pip install mlflow)")
