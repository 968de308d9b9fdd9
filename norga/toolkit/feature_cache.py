"""Test-feature caches for methods whose prompt of a task is fixed once the task is learned (e.g. HiDe-Prompt).

Frozen features never change, and the
features of a test sample under the prompt of task k never change once task k
is learned; only the heads move. So each (sample, prompt) pair is computed once
per run instead of once per evaluation, which makes the accuracy matrix far
cheaper without changing any number it holds. A method whose prompts depend on
trainable state it keeps changing returns no cache and is evaluated uncached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn


@dataclass
class FeatureCache:
    """Test features of one run, kept on the CPU.

    ``frozen[i]``: ((N_i, D) frozen features of test task i, (N_i,) bool "computed").
    ``prompted[(i, k)]``: ((N_i, D) features of test task i under prompt k, (N_i,) bool "computed").
    Valid only while every cached prompt k belongs to a finished task.
    """

    frozen: Dict[int, Tuple[Tensor, Tensor]] = field(default_factory=dict)
    prompted: Dict[Tuple[int, int], Tuple[Tensor, Tensor]] = field(default_factory=dict)

    def slot(self, task: int, prompt: Optional[int], n: int, dim: int) -> Tuple[Tensor, Tensor]:
        """(features (n, dim), computed (n,)) of test task ``task`` under prompt ``prompt`` (None: frozen)."""
        table, key = (self.frozen, task) if prompt is None else (self.prompted, (task, prompt))
        if key not in table:
            table[key] = (torch.zeros(n, dim), torch.zeros(n, dtype=torch.bool))
        return table[key]


@torch.no_grad()
def frozen_features(model: nn.Module, x: Tensor, index: Tensor, cache: FeatureCache, task: int, n: int) -> Tensor:
    """Frozen features (B, D) of images ``x`` (positions ``index`` (B,) in test task ``task`` of ``n`` samples);
    the whole batch is computed unless every sample is cached."""
    feats, have = cache.slot(task, None, n, model.embed_dim)
    if bool(have[index].all()):
        return feats[index]
    out = model(x).float()
    feats[index], have[index] = out.cpu(), True
    return out


@torch.no_grad()
def prompted_features(model: nn.Module, x: Tensor, index: Tensor, prompt_ids: Tensor, task_prompts,
                      cache: FeatureCache, task: int, n: int) -> Tensor:
    """Features (B, D) of images ``x`` (B, C, H, W), sample b prompted with ``task_prompts[prompt_ids[b]]``.

    ``task_prompts``: stacked prefix prompts (T, ...), or a function ``(k, m) -> prompts`` giving the
    forward's prompts for m samples of prompt id k (e.g. a :class:`~norga.models.PromptInput` of tokens).

    ``index`` (B,) are the samples' positions in test task ``task`` (size ``n``);
    only pairs missing from ``cache`` are computed, one forward per prompt id.
    """
    out = torch.empty(len(x), model.embed_dim)
    for k in prompt_ids.unique().tolist():
        chosen = (prompt_ids == k).cpu()
        feats, have = cache.slot(task, k, n, model.embed_dim)
        missing = chosen & ~have[index]
        if missing.any():
            m = int(missing.sum())
            prompt = (task_prompts(k, m) if callable(task_prompts)
                      else task_prompts[k].expand(m, *task_prompts.shape[1:]))
            feats[index[missing]] = model(x[missing.to(x.device)], prompt).float().cpu()
            have[index[missing]] = True
        out[chosen] = feats[index[chosen]]
    return out
