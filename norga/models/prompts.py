"""Per-task prefix prompts (one prompt per task, HiDe-Prompt style).

Layout of one task's prompt e_t, shape (P, 2, L, H, Dh):

* P — number of prompted blocks (``PromptedViT.prompt_layers``),
* 2 — index 0 holds the prefix *keys*, index 1 the prefix *values*,
* L — prefix length (number of prefix experts per head),
* H, Dh — heads and head dim of the backbone's attention.

A batch of prefixes is the same with a leading batch dim: (B, P, 2, L, H, Dh);
sample b uses ``prefix[b]`` only, so keys and values never mix across samples.
Prompts are initialised uniformly in [-1, 1] as in the authors' code (``init="uniform", scale=1``); the
other initialisations (``normal``, ``zero_values``) exist for the small-scale ablations of issue #33.

Prompts of different lengths per block, or prompt tokens prepended to the
sequence, are passed as a :class:`norga.models.PromptInput` instead
(``PromptInput.from_stacked`` converts this layout).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn


PROMPT_INITS = ("uniform", "normal", "zero_values")


def _initialised(drawn: Tensor, init: str, scale: float) -> Tensor:
    """A U(-1, 1) draw (P, 2, L, H, Dh) turned into ``init``'s distribution (the uniform default with scale 1:
    unchanged, bit for bit)."""
    if init == "normal":
        return drawn.normal_(0.0, scale)
    if scale != 1.0:
        drawn = drawn * scale
    if init == "zero_values":
        drawn[:, 1] = 0.0
    return drawn


class PromptPool(nn.Module):
    """``num_tasks`` independent prompts, each (P, 2, L, H, Dh), as a ParameterList."""

    def __init__(self, num_tasks: int, num_layers: int, length: int, num_heads: int, head_dim: int,
                 init: str = "uniform", scale: float = 1.0):
        """``init``: ``uniform`` U(-scale, scale); ``normal`` N(0, scale^2); ``zero_values``: keys U(-scale, scale),
        values 0. Every prompt is first drawn U(-1, 1) from the global RNG (the authors' draw, so the default
        consumes the RNG exactly as their code does), then rescaled or redrawn."""
        super().__init__()
        for name, value in (("num_tasks", num_tasks), ("num_layers", num_layers), ("length", length),
                            ("num_heads", num_heads), ("head_dim", head_dim)):
            if int(value) < 1:
                raise ValueError(f"PromptPool {name} must be >= 1, got {value}")
        self.shape = (num_layers, 2, length, num_heads, head_dim)
        if init not in PROMPT_INITS:
            raise ValueError(f"PromptPool init must be one of {PROMPT_INITS}, got {init!r}")
        self.prompts = nn.ParameterList(
            nn.Parameter(_initialised(torch.empty(self.shape).uniform_(-1.0, 1.0), init, scale))
            for _ in range(num_tasks)
        )

    @property
    def num_tasks(self) -> int:
        return len(self.prompts)

    def prompt(self, task: int) -> Tensor:
        """Raw prompt e_task, (P, 2, L, H, Dh)."""
        self._check_task(task)
        return self.prompts[task]

    def ensembled(self, task: int, momentum: float) -> Tensor:
        """p_t = (1 - m) e_t + m * mean(e_0..e_{t-1}), earlier prompts detached; (P, 2, L, H, Dh).

        For the first task (or m = 0) this is e_t itself.
        """
        self._check_task(task)
        if task == 0 or momentum == 0:
            return self.prompts[task]
        previous = torch.stack([self.prompts[i].detach() for i in range(task)]).mean(0)
        return (1.0 - momentum) * self.prompts[task] + momentum * previous

    def gather(self, task_ids: Tensor | Sequence[int]) -> Tensor:
        """Per-sample prompts for task ids (B,) -> (B, P, 2, L, H, Dh)."""
        task_ids = torch.as_tensor(task_ids, dtype=torch.long)
        if task_ids.dim() != 1:
            raise ValueError(f"task_ids must be 1-D (B,), got shape {tuple(task_ids.shape)}")
        if task_ids.numel() and (task_ids.min() < 0 or task_ids.max() >= self.num_tasks):
            raise ValueError(f"task ids must lie in [0, {self.num_tasks - 1}], got {task_ids.tolist()}")
        return torch.stack(list(self.prompts)).index_select(0, task_ids.to(self.prompts[0].device))

    def init_from(self, task: int, source: int) -> None:
        """Copy prompt ``source`` into prompt ``task`` (new prompt starts from the previous one)."""
        self._check_task(task)
        self._check_task(source)
        with torch.no_grad():
            self.prompts[task].copy_(self.prompts[source])

    def train_only(self, task: int) -> None:
        """Make prompt ``task`` the only trainable one."""
        self._check_task(task)
        for i, p in enumerate(self.prompts):
            p.requires_grad_(i == task)

    def _check_task(self, task: int) -> None:
        if not 0 <= task < self.num_tasks:
            raise IndexError(f"task {task} out of range for a pool of {self.num_tasks} prompts")
