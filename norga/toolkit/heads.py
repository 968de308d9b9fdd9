"""Output layers: the classifier head psi and the task-identity head omega.

Both map features (B, D) to logits over *all* classes of the benchmark (B, C);
callers mask classes not seen yet (``masked_logits``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn


MLP_STYLES = ("official", "pre_norm")
INITS = ("trunc_normal", "pytorch")


class OfficialResidualMapping(nn.Module):
    """The authors' TII mapping: **one** residual block (B, D) -> (B, D) for any list of ratios.

    Linears D -> r_0 D -> r_1 D -> ... -> r_{n-1} D -> D (n + 1 of them); a GELU
    follows every linear except the last and the middle one (index n // 2 for
    n >= 2), which is followed by a LayerNorm instead; output LN(x + f(x)).
    ``[2]`` gives LN(x + W2 GELU(W1 x)); ``[4, 4]`` (their 5-Datasets setting)
    gives LN(x + W3 LN_4D(W2 GELU(W1 x))). Their dropout layers have rate 0
    and are left out.
    """

    def __init__(self, dim: int, ratios: Sequence[int]):
        super().__init__()
        widths = [dim] + [r * dim for r in ratios] + [dim]
        n = len(ratios)
        layers = []
        for i in range(n + 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i == n:
                break
            layers.append(nn.LayerNorm(widths[i + 1]) if 0 < i == n // 2 else nn.GELU())
        self.net = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.net(x))


class PreNormResidualMLP(nn.Module):
    """x + W2 GELU(W1 LN(x)), hidden width ratio * D: one pre-norm block per ratio (norga <= 0.1)."""

    def __init__(self, dim: int, ratio: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, ratio * dim), nn.GELU(), nn.Linear(ratio * dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class TaskIdentityHead(nn.Module):
    """TII head: frozen features (B, D) -> residual mapping -> linear over classes (B, C).

    ``style="official"``: the authors' single residual block over ``mlp_ratios``
    (:class:`OfficialResidualMapping`); ``"pre_norm"``: one
    :class:`PreNormResidualMLP` per ratio. ``mlp_ratios=[]`` gives a plain
    linear layer under both styles.
    """

    def __init__(self, dim: int, num_classes: int, mlp_ratios: Sequence[int] = (2,), style: str = "official"):
        super().__init__()
        if style not in MLP_STYLES:
            raise ValueError(f"unknown TII MLP style {style!r}; choose one of {MLP_STYLES}")
        if not mlp_ratios:
            self.blocks = nn.Identity()
        elif style == "official":
            self.blocks = OfficialResidualMapping(dim, mlp_ratios)
        else:
            self.blocks = nn.Sequential(*[PreNormResidualMLP(dim, r) for r in mlp_ratios])
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.blocks(x))


def init_linear_layers(module: nn.Module, scheme: str) -> nn.Module:
    """Re-initialise every ``nn.Linear`` in ``module``; returns ``module``.

    ``trunc_normal``: weights ~ N(0, 0.02^2) truncated to [-2, 2] (timm's ViT
    init, the authors' heads), biases 0. ``pytorch``: keep PyTorch's default
    (Kaiming-uniform weights, uniform biases). LayerNorms are left at (1, 0).
    """
    if scheme not in INITS:
        raise ValueError(f"unknown head init {scheme!r}; choose one of {INITS}")
    if scheme == "trunc_normal":
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                nn.init.trunc_normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
    return module


def masked_logits(logits: Tensor, allowed: Tensor) -> Tensor:
    """Set logits of classes outside ``allowed`` (bool (C,) or (B, C)) to -inf."""
    return logits.masked_fill(~allowed.to(logits.device), float("-inf"))


def class_mask(num_classes: int, classes: Sequence[int], device=None) -> Tensor:
    """Bool (C,) mask that is True for ``classes``."""
    mask = torch.zeros(num_classes, dtype=torch.bool, device=device)
    mask[torch.as_tensor(list(classes), dtype=torch.long, device=device)] = True
    return mask
