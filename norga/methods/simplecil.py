"""SimpleCIL as a registered method: prototypes (class means of frozen features), nearest by cosine.

Nothing is trained: task t adds the mean frozen feature of each of its classes
(un-augmented training images), and a test sample's logits are its similarity
to every prototype — cosine (the paper's choice) or negative squared Euclidean
distance. It infers no task id (``Prediction.task_ids = None``); its logits
with the true task given are the same logits, restricted by the evaluation to
that task's classes. Prototypes of classes not learned yet score -inf.
"""
from __future__ import annotations

from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch


@register_method("simplecil")
class SimpleCIL(Method):
    """Class prototypes (C, D) of frozen features; ``learned`` (C,) marks the classes that have one."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.model = self.frozen_token_model(vit)
        self.prototypes = torch.zeros(self.num_classes, self.model.embed_dim, device=device)
        self.learned = torch.zeros(self.num_classes, dtype=torch.bool, device=device)

    @property
    def train_batch_size(self) -> int:
        return self.cfg.eval_batch_size  # the augmented loader is never used

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        feats, labels = self.frozen_pass(self.model, loaders.train_plain)
        for c in self.task_classes[task]:
            members = feats[labels == c]
            if len(members) == 0:
                raise ValueError(f"class {c} of task {task} has no training samples")
            self.prototypes[c] = members.mean(0).to(self.device)
            self.learned[c] = True

    def logits(self, feats: Tensor) -> Tensor:
        """(B, D) features -> (B, C) similarities to the prototypes; -inf for classes without one."""
        if self.cfg.method.metric == "cosine":
            scores = F.normalize(feats, dim=-1) @ F.normalize(self.prototypes, dim=-1).T
        else:
            scores = -torch.cdist(feats, self.prototypes).pow(2)
        return scores.masked_fill(~self.learned, float("-inf"))

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        logits = self.logits(self.frozen_query(batch, cache))
        return Prediction(logits, logits)

    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"prototypes": self.prototypes.cpu(), "learned": self.learned.cpu()}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        self.prototypes.copy_(state["prototypes"].to(self.device))
        self.learned.copy_(state["learned"].to(self.device))

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "metric": self.cfg.method.metric, "prototypes": int(self.learned.sum())}

    def summary(self) -> str:
        return f"method: simplecil (class means of frozen features, {self.cfg.method.metric} similarity)"
