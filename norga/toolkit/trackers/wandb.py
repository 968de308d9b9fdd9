"""Weights & Biases tracker (``pip install "norga[wandb]"``); ``WANDB_MODE=offline`` writes under ``WANDB_DIR``.

The project is ``WANDB_PROJECT`` (default ``norga``); a resumed run continues the W&B run whose id is kept in
``trackers.json`` (``resume="allow"``).
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Dict, Optional

from .base import Tracker, register_tracker

OFFLINE_MODES = ("offline", "disabled", "dryrun")


@register_tracker
class WandbTracker(Tracker):
    name = "wandb"
    package = "wandb"
    extra = "wandb"

    @classmethod
    def problem(cls) -> Optional[str]:
        missing = super().problem()
        if missing or os.environ.get("WANDB_MODE", "").lower() in OFFLINE_MODES or os.environ.get("WANDB_API_KEY"):
            return missing
        wandb = importlib.import_module("wandb")
        if not wandb.api.api_key:  # no key in the environment or ~/.netrc
            return "not logged in to Weights & Biases: run `wandb login`, or set WANDB_MODE=offline"
        return None

    def __init__(self, run_dir: Path, config: dict, resume: dict):
        super().__init__(run_dir, config, resume)
        wandb = importlib.import_module("wandb")
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "norga"), id=resume.get("run_id"),
                               resume="allow" if resume.get("run_id") else None, config=config,
                               name=Path(run_dir).resolve().name, reinit="create_new")

    def state(self) -> dict:
        return {"run_id": self._run.id, "project": self._run.project}

    def scalars(self, values: Dict[str, float], step: int) -> None:
        self._run.log(values)

    def finish(self, final: Dict[str, float], status: str) -> None:
        self._run.summary.update({**{f"final/{k}": v for k, v in final.items()}, "status": status})
        self._run.finish(exit_code=0 if status == "complete" else 1)

    def close(self) -> None:
        self._run.finish()
