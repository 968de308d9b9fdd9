"""Gating score functions for prefix experts (paper Sections 3.2 and 4.1).

A gate maps the scaled attention score ``s = q·k_p / sqrt(Dh)`` of a prefix
key to its gated score. Image-token scores never pass through a gate.

* ``linear`` — plain prefix tuning (eq. 11): the score is left unchanged.
* ``norga``  — non-linear residual gate (eq. 12): ``s + alpha * act(tau * s)``
  with ``act`` one of the registered activations (tanh, sigmoid, gelu) and
  learnable scalars ``alpha`` and ``tau`` (one pair per prompted layer).

Gates are looked up by name in :data:`GATES`; a new gate is one small class
decorated with :func:`register_gate`. Every gate exposes :meth:`Gate.extra`,
the *additive* term it puts on top of the linear score; the fast attention
path folds exactly this term into scaled-dot-product attention.
"""
from __future__ import annotations

from typing import Callable, Dict, Type

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError

ACTIVATIONS: Dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,  # exact (erf) GELU
}

GATES: Dict[str, Type["Gate"]] = {}


def register_gate(name: str):
    """Class decorator adding a gate to :data:`GATES` under ``name``."""

    def wrap(cls: Type["Gate"]) -> Type["Gate"]:
        if name in GATES:
            raise ValueError(f"gate {name!r} is already registered")
        GATES[name] = cls
        cls.name = name
        return cls

    return wrap


class Gate(nn.Module):
    """Base class. ``forward(s) = s + extra(s)`` elementwise, any shape."""

    name = "base"
    is_linear = False

    def extra(self, scores: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, scores: Tensor) -> Tensor:
        if self.is_linear:
            return scores
        return scores + self.extra(scores)

    def freeze(self) -> None:
        """Stop training this gate's parameters (NoRGa: after task 1)."""
        for p in self.parameters():
            p.requires_grad_(False)

    def unfreeze(self) -> None:
        for p in self.parameters():
            p.requires_grad_(True)


@register_gate("linear")
class LinearGate(Gate):
    """Plain prefix tuning: prefix scores are left unchanged (no parameters)."""

    is_linear = True

    def __init__(self, **unused):
        super().__init__()
        if unused:
            raise TypeError(
                f"gate 'linear' takes no options, got {sorted(unused)}; "
                "remove them or use gate 'norga'"
            )

    def extra(self, scores: Tensor) -> Tensor:
        return torch.zeros_like(scores)


@register_gate("norga")
class NoRGaGate(Gate):
    """Non-linear residual gate: ``s -> s + alpha * act(tau * s)`` (paper eq. 12).

    ``alpha`` and ``tau`` are learnable 0-d parameters initialised to
    ``alpha_init`` / ``tau_init`` (1.0 as in the authors' code).
    """

    def __init__(self, activation: str = "tanh", alpha_init: float = 1.0, tau_init: float = 1.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"model.activation: unknown NoRGa activation {activation!r}; choose one of {sorted(ACTIVATIONS)}"
            )
        self.activation = activation
        self.act = ACTIVATIONS[activation]
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.tau = nn.Parameter(torch.tensor(float(tau_init)))

    def extra(self, scores: Tensor) -> Tensor:
        return self.alpha * self.act(self.tau * scores)

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


def build_gate(name: str, **options) -> Gate:
    """Create a gate by registry name, e.g. ``build_gate("norga", activation="gelu")``.

    An unknown name or activation raises :class:`norga.config.ConfigError` (a ValueError) naming the config key.
    """
    if name not in GATES:
        raise ConfigError(f"model.gate: unknown gate {name!r}; choose one of {sorted(GATES)}")
    return GATES[name](**options)
