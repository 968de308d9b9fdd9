"""What APER and EASE share: training tuned parameters through a cosine head on one task's classes, and class
means of features (their prototypes).

The training stage is the APER/EASE code's: a fresh :class:`~norga.models.adapters.CosineHead` over the task's
classes (labels mapped to 0..K-1), cross-entropy, SGD with momentum and weight decay on the tuned parameters and
the head, cosine decay from ``lr`` to ``min_lr`` over the epochs (stepped once per epoch).
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.adapters import CosineHead, tuning
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.training import Stage, run_stage


def class_means(feats: Tensor, labels: Tensor, classes: Sequence[int]) -> Tensor:
    """(N, D) features, (N,) labels -> (len(classes), D) the mean feature of each class, in ``classes`` order."""
    means = []
    for c in classes:
        members = feats[labels == c]
        if len(members) == 0:
            raise ValueError(f"class {c} has no training samples")
        means.append(members.mean(0))
    return torch.stack(means)


def local_labels(labels: Tensor, classes: Sequence[int], num_classes: int) -> Tensor:
    """Global labels (B,) -> positions in ``classes`` (B,); a label outside ``classes`` raises."""
    position = torch.full((num_classes,), -1, dtype=torch.long)
    position[torch.as_tensor(list(classes))] = torch.arange(len(classes))
    out = position[labels.cpu().long()]
    if (out < 0).any():
        raise ValueError("a training label lies outside the task's classes")
    return out


def train_with_cosine_head(name: str, task: int, features: Callable[[Tensor], Tensor], tuned: List[nn.Parameter],
                           classes: Sequence[int], num_classes: int, loader, opts, dim: int, device,
                           train_modules: Sequence[nn.Module], lr_key: str) -> List[dict]:
    """Train ``tuned`` (and a fresh cosine head) on ``loader``'s (x, y) batches of the task's ``classes``.

    ``features``: images (B, 3, H, W) on the device -> (B, D) tuned features; ``opts`` holds epochs, lr, min_lr,
    momentum, weight_decay. Returns :func:`run_stage`'s per-epoch history.
    """
    head = CosineHead(dim, len(classes)).to(device)
    params = [*tuned, *head.parameters()]
    optimizer = torch.optim.SGD(params, lr=opts.lr, momentum=opts.momentum, weight_decay=opts.weight_decay)
    scheduler = epoch_scheduler(optimizer, "cosine", opts.epochs, min_lr=opts.min_lr)

    def forward(batch):
        x, y = batch
        return {"logits": head(features(x.to(device))), "labels": local_labels(y, classes, num_classes).to(device)}

    return run_stage(Stage(name, task, opts.epochs, optimizer, scheduler, train_modules=[*train_modules, head],
                           lr_key=lr_key),
                     batches=lambda epoch: loader, forward=forward,
                     terms={"ce": lambda out: F.cross_entropy(out["logits"], out["labels"])})


class TunedView(nn.Module):
    """``model`` (a PromptedViT whose blocks carry tuning wrappers) run with tuning ``active`` (None: frozen):
    images (B, 3, H, W) -> (B, D); what :func:`~norga.toolkit.stages.extract_features` expects."""

    def __init__(self, model: nn.Module, active):
        super().__init__()
        self.model, self.active, self.embed_dim = model, active, model.embed_dim

    def forward(self, x: Tensor, prompts=None) -> Tensor:
        with tuning(self.model, self.active):
            return self.model(x)


@torch.no_grad()
def cached_features(model: nn.Module, batch, cache, active, device) -> Tensor:
    """Test features (B, D) of ``batch`` under tuning ``active`` (None: frozen), each sample computed once per run
    through ``cache`` (a :class:`~norga.toolkit.feature_cache.FeatureCache`; valid once that tuning is final)."""
    feats, have = cache.slot(batch.task, active, batch.size, model.embed_dim)
    if bool(have[batch.index].all()):
        return feats[batch.index].to(device)
    with tuning(model, active):
        out = model(batch.images).float()
    feats[batch.index], have[batch.index] = out.cpu(), True
    return out.to(device)
