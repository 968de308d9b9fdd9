"""Parts of HiDe-LoRA (:mod:`.hidelora`) its task-identity learners (:mod:`.hidelora_tii`) share: the view of the
backbone under one LoRA branch, the factor momentum and the reference's initialisation of A."""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import List, Optional

import torch
from torch import Tensor, nn


class TaskLoRAModel(nn.Module):
    """``model(x, k)``: features (B, D) of images x under task k's LoRA only (``k`` None: the frozen backbone).

    The ``prompts`` argument of the prompt methods' feature helpers carries the task index here, so
    :func:`~norga.toolkit.stages.extract_features` and :func:`~norga.toolkit.feature_cache.prompted_features` work
    unchanged."""

    def __init__(self, model: nn.Module, wrappers: nn.ModuleDict):
        super().__init__()
        self.model, self.wrappers, self.embed_dim = model, wrappers, model.embed_dim
        self.activate(())

    def activate(self, tasks) -> None:
        """Apply the branches of ``tasks`` (indices) in every wrapper from now on; () is the frozen backbone."""
        for w in self.wrappers.values():
            w.active = tuple(tasks)

    @contextmanager
    def using(self, task: int):
        """Within the block only task ``task``'s branches are applied; after it, none (the frozen backbone)."""
        self.activate((task,))
        try:
            yield
        finally:
            self.activate(())

    def forward(self, x: Tensor, task: Optional[int] = None) -> Tensor:
        if task is None:
            return self.model(x)
        with self.using(int(task)):
            return self.model(x)


def every_branch_scaled(wrapper, scale: float) -> Tensor:
    """(n_branches, P) coefficients of a :class:`~norga.models.lora_qkv.LoRAQKV`, all ``scale`` (alpha / r)."""
    return torch.full((len(wrapper.branches), len(wrapper.targets)), scale, device=wrapper.qkv.weight.device)


def mix_with_previous(factors: List[Tensor], momentum: float) -> Tensor:
    """(1 - m) F_t + m mean(F_0..F_{t-1}) of one factor over tasks 0..t (``factors``: t + 1 tensors of one shape)."""
    old = torch.stack(factors[:-1]).mean(dim=0)
    return (1.0 - momentum) * factors[-1] + momentum * old


def reference_down_init(down: Tensor) -> None:
    """A (P, r, D) in place ~ U(-1/sqrt(r), 1/sqrt(r)): the reference's kaiming_uniform(a=sqrt(5)) of a (D, r)
    tensor, whose fan-in is r."""
    bound = 1.0 / math.sqrt(down.shape[1])
    with torch.no_grad():
        down.uniform_(-bound, bound)
