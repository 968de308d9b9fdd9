"""TensorBoard tracker: scalars into ``DIR/tensorboard/`` (a resumed run appends to the same folder)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from .base import Tracker, register_tracker


@register_tracker
class TensorBoardTracker(Tracker):
    name = "tensorboard"
    package = "tensorboard"
    extra = "tensorboard"

    def __init__(self, run_dir: Path, config: dict, resume: dict):
        super().__init__(run_dir, config, resume)
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        self._config = config

    def scalars(self, values: Dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)

    def finish(self, final: Dict[str, float], status: str) -> None:
        for key, value in final.items():
            self._writer.add_scalar(f"final/{key}", value, 0)
        self._writer.add_text("config", "```\n" + json.dumps(self._config, indent=2, default=str) + "\n```")
        self._writer.add_text("status", status)
        self.close()

    def close(self) -> None:
        self._writer.close()
