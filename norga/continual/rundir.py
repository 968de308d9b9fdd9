"""Run directory: atomic writes of config, metrics, accuracy matrix, checkpoints and the log.

Layout of ``DIR``::

    config.yaml          fully resolved config
    metrics.json         FA/CA/FM/BWT, acc_matrix, TII, timings (completed tasks only)
    acc_matrix.csv       rows = task i, columns = after learning task t (empty where t < i)
    log.txt              human-readable log
    checkpoints/task_XX.pt   state after task XX (prompts, gates, heads, TII head,
                             that task's Gaussian statistics, RNG states)
"""
from __future__ import annotations

import csv
import io
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import List, Optional

import torch
import yaml


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder + rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"

    def checkpoint_path(self, task: int) -> Path:
        return self.checkpoints / f"task_{task:02d}.pt"

    def completed_tasks(self) -> int:
        """Number of leading tasks whose checkpoint exists (0, 1, 2, ...)."""
        n = 0
        while self.checkpoint_path(n).is_file():
            n += 1
        return n

    def save_checkpoint(self, task: int, state: dict) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(self.checkpoint_path(task), buffer.getvalue())

    def load_checkpoint(self, task: int) -> dict:
        return torch.load(self.checkpoint_path(task), map_location="cpu", weights_only=False)

    def write_config(self, resolved: dict) -> None:
        atomic_write_bytes(self.root / "config.yaml", yaml.safe_dump(resolved, sort_keys=False).encode())

    def read_config(self) -> Optional[dict]:
        path = self.root / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.is_file() else None

    def write_metrics(self, metrics: dict) -> None:
        atomic_write_bytes(self.root / "metrics.json", (json.dumps(metrics, indent=2) + "\n").encode())

    def read_metrics(self) -> Optional[dict]:
        path = self.root / "metrics.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def write_matrix_csv(self, rows: List[List[Optional[float]]]) -> None:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["task"] + [f"after_task_{t}" for t in range(len(rows))])
        for i, row in enumerate(rows):
            writer.writerow([i] + ["" if v is None else f"{v:.6f}" for v in row])
        atomic_write_bytes(self.root / "acc_matrix.csv", out.getvalue().encode())

    def logger(self) -> logging.Logger:
        """Logger writing to log.txt (appending across resumes) and to stdout."""
        self.root.mkdir(parents=True, exist_ok=True)
        log = logging.getLogger(f"norga.run.{self.root.resolve()}")
        if not log.handlers:
            log.setLevel(logging.INFO)
            fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
            for handler in (logging.FileHandler(self.root / "log.txt"), logging.StreamHandler()):
                handler.setFormatter(fmt)
                log.addHandler(handler)
            log.propagate = False
        return log
