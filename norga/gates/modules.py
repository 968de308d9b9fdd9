"""Gating score functions for prefix experts (paper Sections 3.2 and 4.1).

A gate maps the scaled attention score ``s = q·k_p / sqrt(Dh)`` of a prefix
key to its gated score. Image-token scores never pass through a gate.

* ``linear`` — plain prefix tuning (eq. 11): the score is left unchanged.
* ``norga``  — non-linear residual gate (eq. 12): ``s + alpha * act(tau * s)``
  with ``act`` one of the registered activations (tanh, sigmoid, gelu) and
  learnable scalars ``alpha`` and ``tau`` (one pair per prompted layer).
* ``norga_headwise`` — the same with ``alpha`` and ``tau`` per attention head (MH-MoE's head-wise idea).

Gates are looked up by name in :data:`GATES` (as timm's ``layers`` look up activations and attention layers
by name); a new gate is one small class decorated with :func:`register_gate`, and it owns everything about
itself:

* :meth:`Gate.extra` — the *additive* term it puts on top of the linear score
  (the fast attention path folds exactly this term into scaled-dot-product attention);
* ``Options`` — a dataclass of its config options (``method.gate: {name: ..., <options>}``),
  registered torch-free under the gate's name in :mod:`norga.gates.schema`, which checks a config's gate
  section once, when the config is read (before torch loads), errors naming ``method.gate.<key>``;
* :meth:`Gate.trains_on` — on which tasks its parameters train (NoRGa: the first only);
* :meth:`Gate.report` — the values it reports per layer (NoRGa: alpha, tau) for
  ``metrics.json`` and the epoch log.

A run resolves its config's gate section (already checked) once into a :class:`GateFactory`; the prompted
blocks receive the factory and call it with their head count (timm's ``attn_layer`` pattern).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Type

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import registrar
from .schema import GATE_OPTIONS, NoOptions, NoRGaOptions, resolve_gate_spec

ACTIVATIONS: Dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,  # exact (erf) GELU
}

GATES: Dict[str, Type["Gate"]] = {}


_register_class = registrar(GATES, "gate", set_name=True)


def register_gate(name: str):
    """Class decorator adding a gate to :data:`GATES` under ``name`` (sets ``cls.name``). Its ``Options`` join the
    torch-free :data:`norga.gates.schema.GATE_OPTIONS` (the built-in gates' are registered there already, so
    their configs are checked before torch loads; a gate added elsewhere is checked once its module is imported)."""
    def wrap(cls):
        cls = _register_class(name)(cls)
        known = GATE_OPTIONS.setdefault(name, cls.Options)
        if known is not cls.Options:
            GATES.pop(name)
            raise ValueError(f"gate {name!r}: its Options class differs from the one registered for it in "
                             "norga.gates.schema")
        return cls

    return wrap


class Gate(nn.Module):
    """Base class. ``forward(s) = s + extra(s)`` elementwise, any shape."""

    name = "base"
    is_linear = False
    Options: type = NoOptions

    def trains_on(self, task: int) -> bool:
        """Whether the gate's parameters train during ``task`` (0-based); default: every task."""
        return True

    def report(self) -> Dict[str, float]:
        """Named scalar values of this gate (one prompted layer), e.g. ``{"alpha": .., "tau": ..}``."""
        return {}

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

    def trains_on(self, task: int) -> bool:
        return False  # nothing to train

    def extra(self, scores: Tensor) -> Tensor:
        return torch.zeros_like(scores)


@register_gate("norga")
class NoRGaGate(Gate):
    """Non-linear residual gate: ``s -> s + alpha * act(tau * s)`` (paper eq. 12).

    ``alpha`` and ``tau`` are learnable 0-d parameters initialised to
    ``alpha_init`` / ``tau_init`` (1.0 as in the authors' code). They train on
    the first task only and are frozen afterwards (paper Appendix D, authors' code).
    """

    Options = NoRGaOptions

    def __init__(self, activation: str = "tanh", alpha_init: float = 1.0, tau_init: float = 1.0):
        super().__init__()
        self.activation = activation
        self.act = ACTIVATIONS[activation]
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.tau = nn.Parameter(torch.tensor(float(tau_init)))

    def extra(self, scores: Tensor) -> Tensor:
        return self.alpha * self.act(self.tau * scores)

    def trains_on(self, task: int) -> bool:
        return task == 0

    def report(self) -> Dict[str, float]:
        return {"alpha": float(self.alpha.detach()), "tau": float(self.tau.detach())}

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


@register_gate("norga_headwise")
class HeadwiseNoRGaGate(NoRGaGate):
    """NoRGa with ``alpha`` and ``tau`` per attention head: ``s_h -> s_h + alpha_h * act(tau_h * s_h)``.

    The head-wise idea of MH-MoE applied to prefix experts: each head's prefix experts get their own
    residual gate. Parameters (H, 1, 1) broadcast over scores (B, H, N, L); with equal values in every head
    this is the per-layer :class:`NoRGaGate`. Trains on the first task only, as NoRGa.
    """

    per_head = True

    def __init__(self, num_heads: int, activation: str = "tanh", alpha_init: float = 1.0, tau_init: float = 1.0):
        super().__init__(activation, alpha_init, tau_init)
        self.alpha = nn.Parameter(torch.full((num_heads, 1, 1), float(alpha_init)))
        self.tau = nn.Parameter(torch.full((num_heads, 1, 1), float(tau_init)))

    def report(self) -> Dict[str, float]:
        """Means over heads, and the spread (max − min) of alpha over heads."""
        alpha, tau = self.alpha.detach().flatten(), self.tau.detach().flatten()
        return {"alpha": float(alpha.mean()), "tau": float(tau.mean()),
                "alpha_spread": float(alpha.max() - alpha.min())}

    def extra_repr(self) -> str:
        return f"activation={self.activation}, heads={len(self.alpha)}"


class GateFactory:
    """A resolved gate spec (``{name, every option's value}``, checked by :func:`norga.gates.schema.gate_section`
    when the config was read, or by :meth:`from_options`) that builds one gate per block.

    Blocks receive the factory, not a name and options (as timm resolves ``attn_layer`` once and passes the
    class down): ``factory(num_heads)`` -> a new :class:`Gate`; ``factory.spec`` = ``{name, options...}``.
    """

    def __init__(self, spec: Mapping[str, Any]):
        self.spec: Dict[str, Any] = dict(spec)
        self.name: str = self.spec["name"]
        if self.name not in GATES:  # options registered (torch-free) but no class: a bug of the gate's module
            raise RuntimeError(f"gate {self.name!r} has registered options but no registered gate class")
        self.gate_class = GATES[self.name]
        self.options = {k: v for k, v in self.spec.items() if k != "name"}

    @classmethod
    def from_options(cls, name: str, **options) -> "GateFactory":
        """The factory of gate ``name`` with ``options`` given in Python (not from a config): checked here, by
        :func:`norga.gates.schema.resolve_gate_spec`; errors are :class:`norga.config.ConfigError`."""
        return cls(resolve_gate_spec({"name": name, **options}))

    def __call__(self, num_heads: Optional[int] = None) -> Gate:
        if getattr(self.gate_class, "per_head", False):
            if num_heads is None:
                raise ValueError(f"gate {self.name!r} has parameters per attention head: it needs num_heads")
            return self.gate_class(num_heads=num_heads, **self.options)
        return self.gate_class(**self.options)

    def __repr__(self) -> str:
        return f"GateFactory({self.spec})"


def build_gate(name: str, num_heads: Optional[int] = None, **options) -> Gate:
    """Create a gate by registry name, e.g. ``build_gate("norga", activation="gelu")``; gates with
    ``per_head = True`` get the block's ``num_heads``.

    An unknown name or option raises :class:`norga.config.ConfigError` (a ValueError) naming the config key.
    """
    return GateFactory.from_options(name, **options)(num_heads)
