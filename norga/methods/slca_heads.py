"""SLCA's classifier and the formulas of its classifier alignment (:mod:`norga.methods.slca`).

* :class:`TaskHeads` — one linear head per task (D -> n_t), their logits placed at their classes' columns of a
  (B, C) tensor; a class whose task has no head yet scores -inf;
* :func:`task_normalised_logits` — the alignment's logit normalisation: logits of the seen tasks divided by the
  mean over those tasks of each task's logit L2 norm, then by a temperature;
* :func:`mean_scales` — the factor each class's stored mean is multiplied by before sampling;
* :func:`shifted_samples` — features sampled from N(s_c mu_c, Sigma_c) for every seen class.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..toolkit.gaussian import GaussianStore

NORM_EPS = 1e-7  # added to every task's logit norm (the official code's 1e-7)


class TaskHeads(nn.Module):
    """Linear heads by task: head t maps features (B, D) to the logits (B, n_t) of ``task_classes[t]``."""

    def __init__(self, dim: int, task_classes: Sequence[Sequence[int]]):
        super().__init__()
        self.dim, self.task_classes = dim, [list(c) for c in task_classes]
        self.num_classes = sum(len(c) for c in self.task_classes)
        self.heads = nn.ModuleList()

    def add(self, device) -> nn.Linear:
        """Append the next task's head: weights ~ trunc_normal(std 0.02) in [-2, 2], bias 0 (the official init)."""
        head = nn.Linear(self.dim, len(self.task_classes[len(self.heads)])).to(device)
        nn.init.trunc_normal_(head.weight, std=0.02)
        nn.init.zeros_(head.bias)
        self.heads.append(head)
        return head

    def per_task(self, feats: Tensor) -> List[Tensor]:
        """(B, D) -> [(B, n_t) for every task that has a head]."""
        return [head(feats) for head in self.heads]

    def place(self, parts: Sequence[Tensor]) -> Tensor:
        """Per-task logits [(B, n_t)] -> (B, C) at their classes' columns; other columns -inf."""
        out = parts[0].new_full((parts[0].shape[0], self.num_classes), float("-inf"))
        for t, part in enumerate(parts):
            out[:, self.task_classes[t]] = part
        return out

    def forward(self, feats: Tensor) -> Tensor:
        """(B, D) features -> (B, C) logits; -inf for classes of tasks without a head."""
        return self.place(self.per_task(feats))


def task_normalised_logits(parts: Sequence[Tensor], temperature: float) -> List[Tensor]:
    """Per-task logits [(B, n_t)] -> the same divided by n (B, 1) and by ``temperature``, with
    n = mean over tasks t of (||logits_t||_2 + NORM_EPS), each norm over that task's n_t logits of a sample."""
    norms = torch.stack([part.norm(p=2, dim=-1) + NORM_EPS for part in parts], dim=-1).mean(-1, keepdim=True)
    return [part / norms / temperature for part in parts]


def mean_scales(class_tasks: Tensor, task: int, shrink: float) -> Tensor:
    """(n,) tasks of n classes -> (n,) factors 1 - shrink + shrink (i + 1) / (task + 1) for a class of task i:
    the current task's classes keep their mean (factor 1), the oldest are shrunk most."""
    return 1.0 - shrink + shrink * (class_tasks.double() + 1.0) / (task + 1.0)


def shifted_samples(store: GaussianStore, classes: Sequence[int], scales: Tensor, per_class: int,
                    generator: torch.Generator) -> Tuple[Tensor, Tensor]:
    """``per_class`` features (n per_class, D) float32 per class of ``classes`` from the store's Gaussian moved
    from mu_c to scales[c] mu_c (``scales`` (n,)), and their labels (n per_class,), class by class. The features
    are drawn on ``generator``'s device (:func:`~norga.toolkit.gaussian.draw_generator`) and stay there."""
    feats, labels = store.sample(classes, per_class, generator)
    shift = (scales.float() - 1.0)[:, None] * store.means(classes)
    return feats + shift.repeat_interleave(per_class, 0).to(feats.device), labels
