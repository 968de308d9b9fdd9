"""Accuracy matrices and everything metrics.json records about a run (:class:`MetricsTracker`)."""
from __future__ import annotations

import copy
import platform
from pathlib import Path
from typing import Optional

import numpy
import timm
import torch
import torchvision

from ..config import Config
from ..files import sha256_file
from ..methods.base import Method
from ..models.hub_weights import weights_file
from ..reports.metrics import empty_matrix, summarize
from .provenance import config_history
from .run_folder import code_version


def checkpoint_id(path: Optional[str]) -> Optional[str]:
    """sha256 of a local checkpoint file (first 16 hex digits), or None (a Hub file: its path in the cache)."""
    return sha256_file(Path(path))[:16] if path else None


UNKNOWN = object()  # MetricsTracker's backbone checksum before it is computed (None is a valid checksum)


class MetricsTracker:
    """Accuracy matrices (CIL, TIL, TII) and per-task times -> metrics.json content."""

    def __init__(self, cfg: Config, bench, method: Method, previous: Optional[dict],
                 backbone_sha256_16: Optional[str] = UNKNOWN):
        """``backbone_sha256_16``: the weights file's checksum when already known (the run's checkpoints record
        it: :class:`~norga.engine.run_inputs.InputsCheck`); otherwise it is computed once, at the first
        :meth:`metrics`."""
        T = bench.num_tasks
        self.backbone_sha256_16 = backbone_sha256_16
        self.cfg, self.bench, self.method = cfg, bench, method
        prev = previous or {}
        self.cil = prev.get("acc_matrix", empty_matrix(T))
        self.til = prev.get("til_acc_matrix", empty_matrix(T))
        self.cil_unmasked = prev.get("official", {}).get("acc_matrix", empty_matrix(T))
        self.tii = prev.get("tii_acc_matrix") or empty_matrix(T)
        self.tii_confusion = prev.get("tii_confusion")  # after the last task: [true task][predicted task] counts
        self.times = prev.get("task_seconds", [])
        self.done = prev.get("completed_tasks", 0)
        self.configs: list = []  # the resolved config that trained each recorded task (None: not known)
        # the method's description after the last recorded task: a task that failed or was interrupted after it
        # leaves its gate values and diagnostics out of metrics.json, which describes completed tasks only
        self.described: dict = {"name": method.name}

    def record(self, task: int, evaluation, seconds: float, config: Optional[dict] = None) -> None:
        """Task ``task``'s evaluations of tasks 0..task, its wall seconds and the config that trained it."""
        for i, e in enumerate(evaluation):
            self.cil[i][task], self.til[i][task], self.tii[i][task] = e.cil_accuracy, e.til_accuracy, e.tii_accuracy
            self.cil_unmasked[i][task] = e.cil_unmasked_accuracy
        inferred = all(e.tii_accuracy is not None for e in evaluation)  # methods without task inference: None
        self.tii_confusion = [list(e.tii_predicted) for e in evaluation] if inferred else None
        self.times = self.times[:task] + [seconds]
        self.configs = self.configs[:task] + [None] * (task - len(self.configs)) + [config]
        self.done = task + 1
        self.described = copy.deepcopy(self.method.describe())

    def _block(self, rows):
        return [row[: self.done] for row in rows[: self.done]]

    def _official(self) -> dict:
        """FA, CA, FM as the authors' code reports them: every class competes at evaluation, FM_official."""
        if not self.done:
            return {"acc_matrix": self.cil_unmasked}
        s = summarize(self._block(self.cil_unmasked))
        return {"FA": s["FA"], "CA": s["CA"], "FM": s["FM_official"], "acc_matrix": self.cil_unmasked}

    def metrics(self) -> dict:
        scores = summarize(self._block(self.cil)) if self.done else {}
        til = summarize(self._block(self.til)) if self.done else {}
        m = self.cfg.model
        history = config_history(self.configs[: self.done])
        return {
            **scores,
            "acc_matrix": self.cil,
            "til_FA": til.get("FA"),
            "official": self._official(),
            "til_acc_matrix": self.til,
            **self._task_identity(),
            "tii_confusion": self.tii_confusion,
            "status": "complete" if self.done == self.bench.num_tasks else "incomplete",
            "completed_tasks": self.done,
            "num_tasks": self.bench.num_tasks,
            "config_history": history,
            "mixed_config": len(history) > 1,
            "task_seconds": self.times,
            "seed": self.cfg.seed,
            "class_order": list(self.bench.class_order),
            "task_classes": self.bench.task_classes,
            "data": self.bench.info(),
            "backbone": {"preset": m.preset, "name": m.name, "checkpoint": m.checkpoint,
                         "checkpoint_sha256_16": self._backbone_checksum(), "pretrained": m.pretrained},
            "method": self.described,
            "norga": code_version(),  # version and git commit of the code that produced the run
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "timm": timm.__version__, "torchvision": torchvision.__version__,
                         "numpy": numpy.__version__},
        }

    def _backbone_checksum(self) -> Optional[str]:
        """The backbone weights file's checksum, hashed at most once per tracker (metrics.json is written per task)."""
        if self.backbone_sha256_16 is UNKNOWN:
            self.backbone_sha256_16 = checkpoint_id(weights_file(self.cfg.model))
        return self.backbone_sha256_16

    def _task_identity(self) -> dict:
        """TII accuracies (after the last task, and the matrix); None for a method that infers no task id."""
        final = [self.tii[i][self.done - 1] for i in range(self.done)]
        if None in final:
            return {"tii_accuracy": None, "tii_acc_matrix": None}
        return {"tii_accuracy": final, "tii_acc_matrix": self.tii}

    def summary_line(self, t: int) -> str:
        s = summarize(self._block(self.cil))
        tii = [self.tii[i][t] for i in range(t + 1)]
        tii_text = f", TII acc {sum(tii) / len(tii):.4f}" if None not in tii else ""
        note = self.method.task_summary(t)
        return (f"task {t} done ({t + 1} of {self.bench.num_tasks}): acc on this task {self.cil[t][t]:.4f}, "
                f"running FA {s['FA']:.4f}{tii_text}, time {self.times[t]:.1f}s" + (f"; {note}" if note else ""))
