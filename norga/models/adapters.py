"""Switchable parameter-efficient tuning wrapped around timm's ViT modules (APER and EASE).

Three ways to tune a frozen ViT, each a wrapper around timm's own modules (called unchanged) that
keeps its trainable tensors in a child named ``tuned``:

* :class:`AdaptedBlock` — AdaptFormer-style parallel bottleneck adapters beside a block's MLP:
  with h (B, N, D) the block's post-attention state (its residual stream before ``norm2``),
  ``out = h + ls2(mlp(norm2(h))) + A_k(h)`` where A_k (:class:`BottleneckAdapter`) is the active
  adapter k of the block's list (EASE keeps one per task, APER one). With no adapter active the
  block is timm's block, bit for bit.
* :class:`DeepPromptBlock` — VPT-deep: L learnable tokens (L, D) appended to the block's input
  sequence and dropped from its output, a fresh set per block.
* :class:`ScaleShift` — SSF: a per-channel affine ``y * gamma + beta`` on a module's output.

``active`` on every wrapper selects the tuning: ``None`` runs the frozen backbone, an index k
runs adapter k (prompts and SSF have only index 0). :func:`tuning` sets it on a whole model for
the duration of a ``with`` block, so one backbone serves both the frozen and the tuned features.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class BottleneckAdapter(nn.Module):
    """h (..., D) -> scale * up(dropout(relu(down(h)))) (..., D); down D->r, up r->D.

    Initialised as the APER/EASE code does ("lora" option): ``down`` Kaiming-uniform (a = sqrt 5),
    ``up`` and both biases zero, so a fresh adapter adds nothing.
    """

    def __init__(self, dim: int, bottleneck: int, scale: float, dropout: float):
        super().__init__()
        self.down, self.up = nn.Linear(dim, bottleneck), nn.Linear(bottleneck, dim)
        self.scale, self.dropout = float(scale), float(dropout)
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
            for t in (self.down.bias, self.up.weight, self.up.bias):
                t.zero_()

    def forward(self, h: Tensor) -> Tensor:
        z = F.dropout(F.relu(self.down(h)), self.dropout, self.training)
        return self.up(z) * self.scale


class AdaptedBlock(nn.Module):
    """A timm ``Block`` with a list of parallel adapters (``tuned``); ``active`` picks one or none."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block, self.tuned = block, nn.ModuleList()
        self.active: Optional[int] = None

    def forward(self, x: Tensor) -> Tensor:
        if self.active is None:
            return self.block(x)
        b = self.block
        h = x + b.drop_path1(b.ls1(b.attn(b.norm1(x))))
        return h + b.drop_path2(b.ls2(b.mlp(b.norm2(h)))) + self.tuned[self.active](h).to(h.dtype)


class PromptTokens(nn.Module):
    """``tokens`` (L, D), zero-initialised (the APER code's VPT-deep)."""

    def __init__(self, length: int, dim: int):
        super().__init__()
        self.tokens = nn.Parameter(torch.zeros(length, dim))


class DeepPromptBlock(nn.Module):
    """A timm block whose input gets L prompt tokens appended (after the patches) when active; (B, N, D) in/out."""

    def __init__(self, block: nn.Module, length: int, dim: int):
        super().__init__()
        self.block, self.tuned = block, PromptTokens(length, dim)
        self.active: Optional[int] = None

    def forward(self, x: Tensor) -> Tensor:
        if self.active is None:
            return self.block(x)
        tokens = self.tuned.tokens.to(x.dtype).expand(x.shape[0], -1, -1)
        return self.block(torch.cat([x, tokens], dim=1))[:, :x.shape[1]]


class Affine(nn.Module):
    """SSF's ``scale`` ~ N(1, 0.02^2) and ``shift`` ~ N(0, 0.02^2), both (D,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(dim).normal_(1.0, 0.02))
        self.shift = nn.Parameter(torch.empty(dim).normal_(0.0, 0.02))


class ScaleShift(nn.Module):
    """``module``'s output y, times ``scale`` plus ``shift`` along ``channel_dim`` when active."""

    def __init__(self, module: nn.Module, dim: int, channel_dim: int = -1):
        super().__init__()
        self.module, self.tuned, self.channel_dim = module, Affine(dim), channel_dim
        self.active: Optional[int] = None

    def forward(self, *args, **kwargs) -> Tensor:
        y = self.module(*args, **kwargs)
        if self.active is None:
            return y
        shape = [1] * y.dim()
        shape[self.channel_dim] = -1
        return y * self.tuned.scale.view(shape).to(y.dtype) + self.tuned.shift.view(shape).to(y.dtype)


WRAPPERS = (AdaptedBlock, DeepPromptBlock, ScaleShift)


def attach_adapter_blocks(vit: nn.Module, blocks: Sequence[int]) -> List[AdaptedBlock]:
    """Wrap ``vit.blocks[i]`` for i in ``blocks`` as :class:`AdaptedBlock` (no adapter yet); returns them."""
    out = []
    for i in blocks:
        if isinstance(vit.blocks[i], WRAPPERS):
            raise ValueError(f"block {i} is already wrapped")
        vit.blocks[i] = AdaptedBlock(vit.blocks[i])
        out.append(vit.blocks[i])
    return out


def add_adapters(blocks: Sequence[AdaptedBlock], dim: int, bottleneck: int, scale: float,
                 dropout: float) -> nn.ModuleList:
    """A new adapter on every wrapped block (index = previous count); returns the new adapters in block order."""
    new = nn.ModuleList()
    for block in blocks:
        block.tuned.append(BottleneckAdapter(dim, bottleneck, scale, dropout).to(_device_of(block)))
        new.append(block.tuned[-1])
    return new


def attach_deep_prompts(vit: nn.Module, blocks: Sequence[int], length: int) -> List[DeepPromptBlock]:
    """VPT-deep: wrap ``vit.blocks[i]`` with L prompt tokens each; returns the wrappers."""
    dim = vit.num_features
    for i in blocks:
        vit.blocks[i] = DeepPromptBlock(vit.blocks[i], length, dim).to(_device_of(vit.blocks[i]))
    return [vit.blocks[i] for i in blocks]


def attach_ssf(vit: nn.Module, blocks: Sequence[int]) -> List[ScaleShift]:
    """SSF as the APER code places it: after the patch projection, and in every chosen block after ``norm1``,
    ``attn.qkv``, ``attn.proj``, ``norm2``, ``mlp.fc1``, ``mlp.fc2``; and after the final ``norm``."""
    dim, out = vit.num_features, []

    def wrap(parent: nn.Module, name: str, width: int, channel_dim: int = -1) -> None:
        module = getattr(parent, name)
        setattr(parent, name, ScaleShift(module, width, channel_dim).to(_device_of(module)))
        out.append(getattr(parent, name))

    wrap(vit.patch_embed, "proj", dim, channel_dim=1)  # a conv: (B, D, H', W')
    for i in blocks:
        b = vit.blocks[i]
        wrap(b, "norm1", dim)
        wrap(b.attn, "qkv", b.attn.qkv.out_features)
        wrap(b.attn, "proj", dim)
        wrap(b, "norm2", dim)
        wrap(b.mlp, "fc1", b.mlp.fc1.out_features)
        wrap(b.mlp, "fc2", dim)
    wrap(vit, "norm", dim)
    return out


def wrappers(root: nn.Module) -> Iterator[nn.Module]:
    return (m for m in root.modules() if isinstance(m, WRAPPERS))


@contextmanager
def tuning(root: nn.Module, active: Optional[int]):
    """Within the block, every wrapper under ``root`` runs tuning ``active`` (None: the frozen backbone)."""
    found = list(wrappers(root))
    before = [m.active for m in found]
    for m in found:
        m.active = active
    try:
        yield
    finally:
        for m, b in zip(found, before):
            m.active = b


class CosineHead(nn.Module):
    """Cosine classifier of the APER/EASE code's training stage: (B, D) -> sigma * cos(x, w_c) (B, K).

    ``weight`` (K, D) uniform in +-1/sqrt(D), ``sigma`` (learnable scalar) starts at 1.
    """

    def __init__(self, dim: int, classes: int):
        super().__init__()
        bound = 1.0 / math.sqrt(dim)
        self.weight = nn.Parameter(torch.empty(classes, dim).uniform_(-bound, bound))
        self.sigma = nn.Parameter(torch.ones(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.sigma * F.normalize(x, dim=-1) @ F.normalize(self.weight, dim=-1).T


def _device_of(module: nn.Module) -> torch.device:
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
