"""TUNA's formulas on plain tensors (no model): the loss terms, the adapter merge, the test-time selection and
combination, and the alignment's mean factors. :mod:`norga.methods.tuna` wires them into the method."""
from __future__ import annotations

import math
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_logits(feats: Tensor, weights: Tensor) -> Tensor:
    """(B, D) features, (K, D) class weights -> (B, K) cos(x, w_k) (the code's SimpleContinualLinear, no bias)."""
    return F.normalize(feats, dim=-1) @ F.normalize(weights, dim=-1).T


def cosface_loss(cos: Tensor, labels: Tensor, scale: float, margin: float) -> Tensor:
    """CosFace: mean over the batch of -log( e^{s(cos_y - m)} / (e^{s(cos_y - m)} + sum_{j != y} e^{s cos_j}) ).

    ``cos`` (B, K) cosines over the task's K classes, ``labels`` (B,) in 0..K-1 (the code's AngularPenaltySMLoss)."""
    shifted = cos - margin * F.one_hot(labels, cos.shape[1]).to(cos.dtype)
    return F.cross_entropy(scale * shifted, labels)


def orthogonality_penalty(current: Sequence[Tensor], previous: Sequence[Sequence[Tensor]]) -> Tensor:
    """sum_i (1/L) sum_l | mean( N(U_l) N(U_{i,l})^T ) |: ``current`` the L up-projections (D, r) of the adapter in
    training, ``previous[i]`` those of task i's adapter; N L2-normalises each of the D rows."""
    total = current[0].new_zeros(())
    for old in previous:
        per_layer = [(F.normalize(u, dim=1) @ F.normalize(v, dim=1).T).mean().abs() for u, v in zip(current, old)]
        total = total + sum(per_layer) / len(current)
    return total


def orthogonality_weight(weight: float, task: int) -> float:
    """The penalty's factor at task ``task`` (0-based): reg x exp(-(task + 1)) (the code)."""
    return weight * math.exp(-(task + 1))


def elect_merge(tensors: Sequence[Tensor]) -> Tensor:
    """The universal adapter's value of one parameter from the T task adapters' values (each of one shape):
    sign = +1 where their mean is > 0, else -1; magnitude = the largest |value| among the tasks whose value has
    that sign (0 if none); result sign x magnitude (the code's emr_merge unified vector; rescalers unused)."""
    stacked = torch.stack(list(tensors))
    sign = torch.where(stacked.mean(0) > 0, 1.0, -1.0).to(stacked.dtype)
    agree = stacked * sign > 0
    return (stacked.abs() * agree).amax(0) * sign


def merge_state(states: Sequence[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    """:func:`elect_merge` of every parameter over the task adapters' state dicts (same keys)."""
    return {key: elect_merge([s[key] for s in states]) for key in states[0]}


def entropy(logits: Tensor) -> Tensor:
    """(..., K) logits -> (...) -sum p log(p + 1e-10), p = softmax (the code's selection criterion)."""
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p + 1e-10)).sum(-1)


def select_by_entropy(task_logits: Tensor) -> Tensor:
    """(T, B, K) scaled logits of the T task adapters -> (B,) the adapter of least entropy (first on ties)."""
    return entropy(task_logits).argmin(0)


def combine(specific: Tensor, universal: Tensor) -> Tensor:
    """softmax(specific) + softmax(universal): (B, K) each -> (B, K), the prediction's scores."""
    return torch.softmax(specific, dim=-1) + torch.softmax(universal, dim=-1)


def mean_factors(task_of: Sequence[int], sizes: Sequence[int], task: int, kind: str) -> List[float]:
    """The factor on each seen class's mean when sampling for the alignment after task ``task``.

    ``task_of[k]``: the task of the k-th seen class (in class order); ``sizes``: the classes per task. ``none``: 1;
    ``by_task``: 0.9 + 0.1 (task_of + 1) / (task + 1); ``reference``: the code's formula with its task size
    known - total = -sizes[task], so t_id = k // -sizes[task] (floor division) replaces task_of."""
    if kind == "none":
        return [1.0] * len(task_of)
    if kind == "by_task":
        return [0.9 + 0.1 * (t + 1) / (task + 1) for t in task_of]
    if kind == "reference":
        return [0.9 + 0.1 * (k // -sizes[task] + 1) / (task + 1) for k in range(len(task_of))]
    raise ValueError(f"unknown ca_mean_decay {kind!r}; choose none, reference or by_task")
