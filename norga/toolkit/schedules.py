"""Per-epoch learning-rate schedules, as a pure function of the epoch index.

``lr_factor(epoch, ...)`` is the multiplier of the base lr used **during**
0-based epoch ``epoch``. Two stepping conventions (``method.wtp.schedule_stepping``):

* ``torch`` — the schedule value of the epoch itself: f(epoch). A step
  "at epoch 30" (``milestones: [30]``) applies from 0-based epoch 30 on.
* ``timm`` — the authors' code: timm's scheduler is created with the first
  epoch's lr and ``scheduler.step(e)`` is called *after* epoch e, which sets
  the lr of epoch e + 1 to f(e). So epoch e trains at f(max(e - 1, 0)), and a
  step "at epoch 30" first applies to 0-based epoch 31 (the 32nd epoch).

Schedules (f of an index i, E = total epochs):

* ``constant``: 1;
* ``step``: gamma ** #{m in milestones : i >= m} (timm's periodic step with
  decay_t = 30 is the same for E < 60, which covers every shipped config);
* ``cosine``: r + (1 - r) * (1 + cos(pi * i / E)) / 2 with r = min_lr / lr
  (timm's CosineLRScheduler with t_initial = E);
* ``coda_cosine``: cos(0.99 * (pi / 2) * i / (E - 1)) — CODA-Prompt's own cosine (GT-RIPL/CODA-Prompt
  ``utils/schedulers.py``): from 1 down to cos(0.495 pi) ~ 0.0157 in the last epoch, no floor, no warm-up.

Warm-up (``warmup_epochs`` W > 0, timm's ``warmup_t`` without ``warmup_prefix``): for i < W the factor is
w + i (1 - w) / W with w = warmup_lr / lr, whatever the schedule; from i = W on the schedule's own f(i) (the
cosine is not shifted by W). W = 0 (the default) changes nothing.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from ..config.fields import SCHEDULE_STEPPINGS


def lr_factor(epoch: int, schedule: str, epochs: int, milestones: Sequence[int] = (), gamma: float = 0.1,
              min_ratio: float = 0.0, stepping: str = "torch", warmup_epochs: int = 0,
              warmup_ratio: float = 0.0) -> float:
    """Multiplier of the base lr during 0-based ``epoch``; see the module docstring."""
    if stepping not in SCHEDULE_STEPPINGS:
        raise ValueError(f"unknown schedule stepping {stepping!r}; choose one of {SCHEDULE_STEPPINGS}")
    index = epoch if stepping == "torch" else max(epoch - 1, 0)
    if index < warmup_epochs:
        return warmup_ratio + index * (1.0 - warmup_ratio) / warmup_epochs
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        return float(gamma ** sum(index >= m for m in milestones))
    if schedule == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * index / max(epochs, 1)))
    if schedule == "coda_cosine":
        return math.cos(0.99 * (math.pi / 2) * index / max(epochs - 1, 1))
    raise ValueError(f"unknown schedule {schedule!r}; choose constant, step, cosine or coda_cosine")


def epoch_scheduler(optimizer: torch.optim.Optimizer, schedule: str, epochs: int, milestones: Sequence[int] = (),
                    gamma: float = 0.1, min_lr: float = 0.0, stepping: str = "torch", warmup_epochs: int = 0,
                    warmup_lr: float = 0.0):
    """A ``LambdaLR`` following :func:`lr_factor`; call ``.step()`` once after every epoch.

    ``min_lr`` and ``warmup_lr`` are absolute (as timm's lr_min and warmup_lr_init); each parameter group keeps its
    own ratios min_lr / group lr and warmup_lr / group lr, so a head at 0.1 x lr decays to min_lr too.
    """
    def factor_for(base_lr: float):
        ratio = min_lr / base_lr if base_lr > 0 else 0.0
        warm = warmup_lr / base_lr if base_lr > 0 else 0.0
        return lambda e: lr_factor(e, schedule, epochs, milestones, gamma, ratio, stepping, warmup_epochs, warm)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, [factor_for(g["lr"]) for g in optimizer.param_groups])
