"""Low-rank branches on the query / key / value projections of timm's fused ``qkv`` Linear (InfLoRA, SD-LoRA).

:class:`LoRAQKV` wraps a block's ``attn.qkv`` (an ``nn.Linear`` D -> 3D, called unchanged) and adds, on the
projections named by ``targets`` (a subset of ``"q"``, ``"k"``, ``"v"``), a sum of low-rank branches:

    out[slot(p)] = x W_p^T (+ b_p) + sum_i c_i[p] * x A_i[p]^T B_i[p]^T

for every token state x (..., D), with branch i's down-projection A_i[p] (r_i, D), up-projection B_i[p] (D, r_i)
(:class:`LoRABranch`) and a coefficient c_i[p] given by the owner through :attr:`LoRAQKV.coefficients`
(1 when unset: InfLoRA; SD-LoRA's magnitudes over normalised directions); with :attr:`LoRAQKV.active` set to a
sequence of branch indices only those are applied (HiDe-LoRA: its task's LoRA, or none). The wrapper can also accumulate
the Gram matrix of its inputs, sum over every token of x x^T (D, D) in float64 (``record``), which InfLoRA
designs its down-projections from. With every B = 0 the output equals timm's ``qkv`` exactly.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor, nn

SLOTS = {"q": 0, "k": 1, "v": 2}  # position of each projection in timm's fused qkv output (q | k | v)


class LoRABranch(nn.Module):
    """One low-rank component on P projections: ``down`` A (P, r, D), ``up`` B (P, D, r).

    A starts as ``nn.Linear``'s default (Kaiming-uniform, bound 1 / sqrt(D)) and B at zero, so a fresh branch
    adds nothing.
    """

    def __init__(self, dim: int, rank: int, projections: int):
        super().__init__()
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        bound = 1.0 / math.sqrt(dim)
        self.down = nn.Parameter(torch.empty(projections, rank, dim).uniform_(-bound, bound))
        self.up = nn.Parameter(torch.zeros(projections, dim, rank))

    @property
    def rank(self) -> int:
        return self.down.shape[1]

    def delta(self, x: Tensor) -> Tensor:
        """Token states (..., D) -> the branch's uncoefficiented outputs x A^T B^T (..., P, D)."""
        codes = torch.einsum("...d,prd->...pr", x, self.down.to(x.dtype))
        return torch.einsum("...pr,pdr->...pd", codes, self.up.to(x.dtype))

    def product(self) -> Tensor:
        """The weight update B A of every projection (P, D, D)."""
        return self.up @ self.down


class LoRAQKV(nn.Module):
    """timm's fused ``qkv`` Linear (called unchanged) plus low-rank branches on the projections ``targets``.

    ``coefficients``: None (every branch weighs 1) or a callable (layer, branches) -> (n_branches, P) tensor of
    the coefficient c_i[p] of each branch and projection, set by the method that owns the branches.
    """

    # the frozen-feature store's fingerprint leaves the branches out and keeps frozen_forward_note's line instead
    outside_frozen_forward = ("branches",)

    def __init__(self, qkv: nn.Linear, targets: Sequence[str], layer: int = 0):
        super().__init__()
        if not isinstance(qkv, nn.Linear) or qkv.out_features != 3 * qkv.in_features:
            raise TypeError("LoRAQKV wraps timm's fused qkv nn.Linear (D -> 3D)")
        unknown = [t for t in targets if t not in SLOTS]
        if unknown or not targets or len(set(targets)) != len(targets):
            raise ValueError(f"targets must be distinct names among {sorted(SLOTS)}, got {list(targets)}")
        self.qkv, self.targets, self.layer, self.dim = qkv, tuple(targets), layer, qkv.in_features
        self.branches = nn.ModuleList()
        self.coefficients: Optional[Callable[["LoRAQKV"], Tensor]] = None
        self.active: Optional[Sequence[int]] = None  # indices of the branches applied (HiDe-LoRA); None: all
        self.record = False
        self.gram: Optional[Tensor] = None  # (D, D) float64 sum of x x^T over recorded tokens
        self.tokens = 0

    def add_branch(self, rank: int) -> LoRABranch:
        """Append a fresh branch of rank ``rank`` (on the device of the wrapped weights) and return it."""
        branch = LoRABranch(self.dim, rank, len(self.targets)).to(self.qkv.weight.device)
        self.branches.append(branch)
        return branch

    def applied(self) -> Sequence[int]:
        """Indices of the branches a forward applies now: :attr:`active`, or every branch when it is None."""
        return range(len(self.branches)) if self.active is None else self.active

    def frozen_forward_note(self) -> str:
        """Which branches a forward applies now (a frozen pass, e.g. HiDe-LoRA's, sets ``active = ()``: none)."""
        return "branches applied: " + (",".join(str(i) for i in self.applied()) or "none")

    def reset_record(self) -> None:
        self.gram, self.tokens = None, 0

    def _record(self, x: Tensor) -> None:
        flat = x.detach().reshape(-1, self.dim).double()
        gram = flat.T @ flat
        self.gram = gram if self.gram is None else self.gram + gram
        self.tokens += flat.shape[0]

    def weights(self) -> Tensor:
        """Coefficients (n_branches, P): :attr:`coefficients` or ones."""
        if self.coefficients is not None:
            return self.coefficients(self)
        return torch.ones(len(self.branches), len(self.targets), device=self.qkv.weight.device)

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., 3D): timm's q | k | v plus the branches' sum on the target projections."""
        if self.record:
            self._record(x)
        out = self.qkv(x)
        chosen = self.applied()
        if not len(chosen):
            return out
        coef = self.weights().to(x.dtype)
        delta = sum(coef[i][:, None] * self.branches[i].delta(x) for i in chosen)
        parts: List[Tensor] = list(out.split(self.dim, dim=-1))
        for p, name in enumerate(self.targets):
            parts[SLOTS[name]] = parts[SLOTS[name]] + delta[..., p, :].to(out.dtype)
        return torch.cat(parts, dim=-1)


def attach_lora_qkv(vit: nn.Module, blocks: Sequence[int], targets: Sequence[str]) -> nn.ModuleDict:
    """Wrap ``vit.blocks[i].attn.qkv`` for every i in ``blocks``; returns the wrappers by block (string keys)."""
    wrappers = nn.ModuleDict()
    for i in blocks:
        attn = vit.blocks[i].attn
        if isinstance(attn.qkv, LoRAQKV):
            raise ValueError(f"block {i} already has LoRA branches on its qkv")
        wrappers[str(i)] = LoRAQKV(attn.qkv, targets, layer=int(i))
        attn.qkv = wrappers[str(i)]
    return wrappers


def branch_state(wrappers: nn.ModuleDict) -> Dict[str, List[Dict[str, Tensor]]]:
    """Block -> every branch's (down, up) tensors on the CPU (the frozen qkv weights are not saved)."""
    return {key: [{"down": b.down.detach().cpu(), "up": b.up.detach().cpu()} for b in w.branches]
            for key, w in wrappers.items()}


def load_branches(wrappers: nn.ModuleDict, saved: Dict[str, List[Dict[str, Tensor]]]) -> None:
    """Rebuild every wrapper's branches from :func:`branch_state`'s tensors, all frozen."""
    for key, wrapper in wrappers.items():
        wrapper.branches = nn.ModuleList()
        for item in saved[key]:
            branch = wrapper.add_branch(item["down"].shape[1])
            with torch.no_grad():
                branch.down.copy_(item["down"])
                branch.up.copy_(item["up"])
            branch.requires_grad_(False)
