"""Optimisers by name, for methods whose paper and official code train with different ones (``method.optimizer``).

``make_optimizer("sgd", params, lr, weight_decay, momentum)`` is ``torch.optim.SGD`` with that momentum;
``"adam"`` is ``torch.optim.Adam`` with PyTorch's default betas (0.9, 0.999) and eps (momentum unused). A
method's torch-free config lists the same names in its ``choices`` (tests/test_optimizers.py checks they are
registered). Add one with ``@register_optimizer("name")``.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable

import torch

from ..registry import registrar

OPTIMIZERS: Dict[str, Callable[..., torch.optim.Optimizer]] = {}
register_optimizer = registrar(OPTIMIZERS, "optimizer")  # decorator: @register_optimizer("name")


@register_optimizer("sgd")
def _sgd(params, lr: float, weight_decay: float, momentum: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


@register_optimizer("adam")
def _adam(params, lr: float, weight_decay: float, momentum: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)


def make_optimizer(name: str, params: Iterable, lr: float, weight_decay: float = 0.0,
                   momentum: float = 0.9) -> torch.optim.Optimizer:
    """The optimiser registered as ``name`` over ``params`` (lr per step; weight decay as L2 in the gradient)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; registered: {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name](list(params), lr=lr, weight_decay=weight_decay, momentum=momentum)
