"""Output layers: the classifier head psi and the task-identity head omega.

Both map features (B, D) to logits over *all* classes of the benchmark (B, C);
callers mask classes not seen yet (``masked_logits``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn


class ResidualMLP(nn.Module):
    """x + W2 GELU(W1 LN(x)), hidden width ratio * D."""

    def __init__(self, dim: int, ratio: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, ratio * dim), nn.GELU(),
                                 nn.Linear(ratio * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.net(x)


class TaskIdentityHead(nn.Module):
    """TII head: frozen features (B, D) -> residual MLP blocks -> linear over classes (B, C).

    ``mlp_ratios=[2]`` gives one residual block of hidden width 2D (authors'
    default); ``[4, 4]`` two blocks of 4D (their 5-Datasets setting); ``[]`` a
    plain linear layer.
    """

    def __init__(self, dim: int, num_classes: int, mlp_ratios: Sequence[int] = (2,)):
        super().__init__()
        self.blocks = nn.Sequential(*[ResidualMLP(dim, r) for r in mlp_ratios])
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.blocks(x))


def masked_logits(logits: Tensor, allowed: Tensor) -> Tensor:
    """Set logits of classes outside ``allowed`` (bool (C,) or (B, C)) to -inf."""
    return logits.masked_fill(~allowed.to(logits.device), float("-inf"))


def class_mask(num_classes: int, classes: Sequence[int], device=None) -> Tensor:
    """Bool (C,) mask that is True for ``classes``."""
    mask = torch.zeros(num_classes, dtype=torch.bool, device=device)
    mask[torch.as_tensor(list(classes), dtype=torch.long, device=device)] = True
    return mask
