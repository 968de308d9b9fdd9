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
from typing import Iterator, Optional

import torch

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_mode = "off"


@contextlib.contextmanager
def amp_mode(mode: str) -> Iterator[None]:
    """Run the enclosed code with backbone autocast ``mode`` (restored afterwards)."""
    global _mode
    if mode not in AMP_DTYPES:
        raise ValueError(f"unknown amp mode {mode!r}; choose one of {sorted(AMP_DTYPES)}")
    previous, _mode = _mode, mode
    try:
        yield
    finally:
        _mode = previous


def current_mode() -> str:
    return _mode


def backbone_autocast(device_type: str):
    """The autocast context of a backbone forward on ``device_type`` ('cpu', 'cuda'); a no-op when off."""
    dtype = AMP_DTYPES[_mode]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler(device_type: str) -> Optional["torch.amp.GradScaler"]:
    """A fresh loss scaler for one training stage under ``fp16``; None otherwise."""
    return torch.amp.GradScaler(device_type) if _mode == "fp16" else None
