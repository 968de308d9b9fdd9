"""Mixed precision of a run (``amp: off | bf16 | fp16``): autocast around the frozen backbone only.

The run sets the mode once (:func:`amp_mode`, by the task loop for training and evaluation); every
:class:`~norga.models.PromptedViT` forward then runs timm's blocks under ``torch.autocast`` with that
dtype and returns fp32 features. Everything a method owns stays fp32: prompts, gates (their score
term is computed on fp32 scores, :func:`norga.models.prefix_attention.fast_prefix_attention`), heads,
Gaussian statistics, optimiser states. ``fp16`` training steps scale the loss with a
``torch.amp.GradScaler`` (:func:`grad_scaler`); ``bf16`` has fp32's range and needs none.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch

from .mode_switch import ModeSwitch

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_AMP = ModeSwitch("amp", AMP_DTYPES, "off")


def amp_mode(mode: str):
    """Run the enclosed code with backbone autocast ``mode`` (a context manager; restored afterwards)."""
    return _AMP.use(mode)


def current_mode() -> str:
    return _AMP.value


def backbone_autocast(device_type: str):
    """The autocast context of a backbone forward on ``device_type`` ('cpu', 'cuda'); a no-op when off."""
    dtype = AMP_DTYPES[_AMP.value]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler(device_type: str) -> Optional["torch.amp.GradScaler"]:
    """A fresh loss scaler for one training stage under ``fp16``; None otherwise."""
    return torch.amp.GradScaler(device_type) if _AMP.value == "fp16" else None
