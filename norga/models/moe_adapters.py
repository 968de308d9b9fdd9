"""Mixture-of-LoRA-experts adapters on the MLPs of a frozen timm ViT: LoRAMoE and head-wise MH-MoE.

Both add a routed low-rank correction beside a block's MLP (:class:`AdaptedMlp` wraps
timm's ``Mlp`` and calls it unchanged): ``out = mlp(h) + y(h)`` for every token state
``h`` (..., D) entering the MLP — the post-attention state the MH-MoE paper routes.

* :class:`HeadwiseLoRAMoE` — MH-MoE (paper eqs. 12-16): ``h`` is split into H slices of
  D/H (eq. 12); slice m has its own router W_m (K x D/H) and K private experts
  E_j^(m)(h_m) = B_j^(m) A_j^(m) h_m : R^(D/H) -> R^D of rank r (eq. 14); top-k of the
  router logits a_m = W_m h_m, softmax renormalised over the selected set (eq. 13);
  y = sum_m sum_(j in S_m) alpha_(m,j) E_j^(m)(h_m) (eqs. 15-16).
* LoRAMoE (the paper's baseline, Dou et al. 2024) is the same layer with H = 1: one router
  on the full D-dimensional state and K experts R^D -> R^D (:func:`lora_moe`).

B is zero-initialised, so a fresh adapter leaves the backbone's output unchanged; A is
drawn N(0, 1/in_dim). Each layer can record its last routing decision (``record``) for
the route statistics of :mod:`norga.toolkit.routing`. Shapes: N tokens, D width, H heads
(slices), K experts per head, k selected, r rank.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn


def top_k_routing(logits: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """Router logits (..., K) -> (selected experts (..., k), weights (..., k)): eq. 13.

    The weights are the softmax of the selected logits only (they sum to 1 over the
    selected set); ties go to the lower expert index (``torch.topk`` order).
    """
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"top_k must be in 1..{logits.shape[-1]} (the number of experts), got {k}")
    values, chosen = logits.topk(k, dim=-1)
    return chosen, values.softmax(dim=-1)


class HeadwiseLoRAMoE(nn.Module):
    """H head-aligned slices, each routed top-k among its K private LoRA experts; outputs summed over heads.

    Parameters: ``router`` (H, K, D/H); ``down`` A (H, K, r, D/H); ``up`` B (H, K, D, r).
    """

    def __init__(self, dim: int, heads: int, experts: int, top_k: int, rank: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"heads must divide the width: {heads} does not divide {dim}")
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k must be in 1..experts ({experts}), got {top_k}")
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.dim, self.heads, self.experts, self.top_k, self.rank = dim, heads, experts, top_k, rank
        part = dim // heads
        self.router = nn.Parameter(torch.randn(heads, experts, part) / part ** 0.5)
        self.down = nn.Parameter(torch.randn(heads, experts, rank, part) / part ** 0.5)
        self.up = nn.Parameter(torch.zeros(heads, experts, dim, rank))
        self.record = False
        self.last_routes: Optional[Tensor] = None  # (N, H, k) selected experts of the last forward, when recording

    def route(self, h: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Token states (N, D) -> (slices (N, H, D/H), selected (N, H, k), weights (N, H, k))."""
        slices = h.reshape(len(h), self.heads, self.dim // self.heads)
        logits = torch.einsum("nhs,hks->nhk", slices, self.router)
        chosen, weights = top_k_routing(logits, self.top_k)
        return slices, chosen, weights

    def forward(self, h: Tensor) -> Tensor:
        """(..., D) -> the adapter output y (..., D)."""
        shape = h.shape
        flat = h.reshape(-1, self.dim)
        slices, chosen, weights = self.route(flat)
        if self.record:
            self.last_routes = chosen.detach()
        gates = torch.zeros(len(flat), self.heads, self.experts, dtype=weights.dtype, device=h.device)
        gates = gates.scatter(2, chosen, weights)  # alpha_(m,j) on the selected experts, 0 elsewhere (N, H, K)
        codes = torch.einsum("hkrs,nhs->nhkr", self.down, slices)  # every expert's rank-r code A_j h_m
        out = torch.einsum("nhkr,hkdr->nd", codes * gates[..., None], self.up)  # unselected experts weigh 0
        return out.reshape(shape)


def lora_moe(dim: int, experts: int, top_k: int, rank: int) -> HeadwiseLoRAMoE:
    """LoRAMoE: one router on the full state and K experts R^D -> R^D (the head-wise layer with H = 1)."""
    return HeadwiseLoRAMoE(dim, 1, experts, top_k, rank)


class AdaptedMlp(nn.Module):
    """timm's ``Mlp`` (called unchanged) plus a routed adapter beside it: ``mlp(h) + adapter(h)``."""

    def __init__(self, mlp: nn.Module, adapter: HeadwiseLoRAMoE):
        super().__init__()
        self.mlp, self.adapter = mlp, adapter

    def forward(self, h: Tensor) -> Tensor:
        return self.mlp(h) + self.adapter(h).to(h.dtype)


def attach_adapters(vit: nn.Module, blocks, make) -> nn.ModuleDict:
    """Wrap ``vit.blocks[i].mlp`` for every i in ``blocks`` with ``make()``'s adapter; returns them by block."""
    adapters = nn.ModuleDict()
    for i in blocks:
        block = vit.blocks[i]
        if isinstance(block.mlp, AdaptedMlp):
            raise ValueError(f"block {i} already has an adapter")
        adapters[str(i)] = make()
        block.mlp = AdaptedMlp(block.mlp, adapters[str(i)])
    return adapters
