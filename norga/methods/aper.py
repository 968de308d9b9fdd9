"""APER (ADAM) as a registered method: tune on the first task only, then prototypes of [frozen, tuned] features.

Task 0: the frozen ViT gets one tuning (``method.tuning``: parallel bottleneck adapters, VPT-deep prompts or SSF;
:mod:`norga.models.adapters`), trained with a cosine head on task 0's classes (:mod:`.adapter_stage`), then frozen
for good. From then on nothing is trained. Every task t (task 0 included) adds the prototypes of its classes:
for class c, p_c = [mean f(x), mean g(x)] (2D,) over c's un-augmented training images, with f the frozen
backbone and g the tuned one (the same backbone with the tuning switched on). A test sample's logits are
cos([f(x), g(x)], p_c) (the cosine of the whole 2D vectors); classes not learned yet score -inf. It infers no
task id; its true-task logits are the same logits (the evaluation restricts them to the task's classes).
"""
from __future__ import annotations

from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from ..toolkit.stages import extract_features
from . import register_method
from .adapter_stage import TunedView, attach_tuning, cached_features, class_means, freeze, tune_first_task
from .base import Method, Prediction, TaskLoaders, TestBatch, chosen_blocks

TUNED = 0  # the tuning index of the adapted branch (APER has one)


def concat_cosine(feats: Tensor, prototypes: Tensor) -> Tensor:
    """(B, E) features, (C, E) prototypes -> (B, C) cosine similarities (each E-vector normalised as a whole)."""
    return F.normalize(feats, dim=-1) @ F.normalize(prototypes, dim=-1).T


@register_method("aper")
class APER(Method):
    """Tuning parameters ``tuned`` (trained on task 0 only), prototypes (C, 2D) = [frozen mean, tuned mean],
    ``learned`` (C,)."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model = self.frozen_token_model(vit)  # freezes every backbone weight before the tuning exists
        self.layers = chosen_blocks(vit, c.tuned_layers, "method.tuned_layers")
        dim = self.model.embed_dim
        self.tuned = attach_tuning(self.model.vit, c.tuning, self.layers, c, dim)
        self.prototypes = torch.zeros(self.num_classes, 2 * dim, device=device)
        self.learned = torch.zeros(self.num_classes, dtype=torch.bool, device=device)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        if task == 0:
            self._tune(loaders)
        frozen, labels = self.frozen_pass(TunedView(self.model, None), loaders.train_plain)
        tuned, tuned_labels = extract_features(TunedView(self.model, TUNED), loaders.train_plain, self.device,
                                               desc="tuned feats")
        if not torch.equal(labels, tuned_labels):
            raise RuntimeError("the un-augmented training loader changed its order between two passes")
        classes = self.task_classes[task]
        self.prototypes[classes] = class_means(torch.cat([frozen, tuned], dim=1), labels, classes).to(self.device)
        self.learned[classes] = True

    def _tune(self, loaders: TaskLoaders) -> None:
        """Train the tuning on task 0 with a cosine head over its classes, then freeze it."""
        tune_first_task("aper", self.model, self.tuned, self.task_classes[0], self.num_classes, loaders.train, self.c,
                        self.device, self.config_key("lr"))

    def features(self, batch: TestBatch, cache: Any) -> Tensor:
        """(B, 2D) [frozen, tuned] features of a test batch (both final once task 0 is learned, so cached)."""
        self.preload_frozen(TunedView(self.model, None), batch, cache)
        frozen = cached_features(self.model, batch, cache, None, self.device)
        tuned = cached_features(self.model, batch, cache, TUNED, self.device)
        return torch.cat([frozen, tuned], dim=1)

    def logits(self, feats: Tensor) -> Tensor:
        """(B, 2D) features -> (B, C) cosine to the prototypes; -inf for classes not learned yet."""
        return concat_cosine(feats, self.prototypes).masked_fill(~self.learned, float("-inf"))

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        logits = self.logits(self.features(batch, cache))
        return Prediction(logits, logits)

    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"tuned": {k: v.cpu() for k, v in self.tuned.state_dict().items()},
                "prototypes": self.prototypes.cpu(), "learned": self.learned.cpu()}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        self.tuned.load_state_dict(state["tuned"])
        freeze(self.tuned)  # every checkpoint comes after task 0
        self.prototypes.copy_(state["prototypes"].to(self.device))
        self.learned.copy_(state["learned"].to(self.device))

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "tuning": self.c.tuning, "tuned_layers": self.layers,
                "tuned_parameters": sum(p.numel() for p in self.tuned.parameters()),
                "prototypes": int(self.learned.sum())}

    def summary(self) -> str:
        c = self.c
        what = {"adapter": f"adapters (r={c.bottleneck}, scale {c.adapter_scale:g})",
                "vpt_deep": f"VPT-deep ({c.prompt_length} tokens a block)", "ssf": "SSF"}[c.tuning]
        return (f"method: aper ({what} on blocks {self.layers}, tuned on task 0 only for {c.epochs} epochs; "
                f"cosine to prototypes of [frozen, tuned] features)")
