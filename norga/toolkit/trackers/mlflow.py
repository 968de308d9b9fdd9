"""MLflow tracker (``pip install "norga[mlflow]"``): the tracking URI is ``MLFLOW_TRACKING_URI`` (MLflow's default
otherwise), the experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``norga``); a resumed run continues the MLflow run
whose id is kept in ``trackers.json``."""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Dict

from .base import Tracker, register_tracker

STATUS = {"complete": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


@register_tracker
class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"
    extra = "mlflow"

    def __init__(self, run_dir: Path, config: dict, resume: dict):
        super().__init__(run_dir, config, resume)
        self._mlflow = importlib.import_module("mlflow")
        client = self._mlflow.MlflowClient()
        if resume.get("run_id"):
            self._run_id = resume["run_id"]
            client.update_run(self._run_id, status="RUNNING")
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "norga")
            experiment = client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
            self._run_id = client.create_run(experiment_id, run_name=Path(run_dir).resolve().name).info.run_id
            client.log_text(self._run_id, json.dumps(config, indent=2, default=str), "config.json")
        self._client = client

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
