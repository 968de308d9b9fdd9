"""The options of every registered gate, torch-free, so a gate mistake in a config is reported before torch loads.

A gate (``norga.models.gates``) is a torch module registered by name; its config options (``method.gate:
{name: ..., <options>}``) are a dataclass registered here under the same name with :func:`gate_options_for`,
and the gate class takes that dataclass as its ``Options``. :func:`validate_gate` checks a gate section (name
and options, errors naming ``method.gate.<key>``) and returns it with every default filled in; the config
sections of the prefix methods call it when a config is read, the gate factory when a run is built.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping

from ..registry import registrar
from .fields import ConfigError, _f
from .parsing import from_dict

ACTIVATION_NAMES = ("tanh", "sigmoid", "gelu")  # sigma of NoRGa's eq. 12; norga.models.gates.ACTIVATIONS implements each

GATE_OPTIONS: Dict[str, type] = {}  # gate name -> its options dataclass

# Class decorator: register the options dataclass of gate ``name``.
gate_options_for = registrar(GATE_OPTIONS, "gate options")


@gate_options_for("linear")
@dataclass
class NoOptions:
    """A gate without options."""


@gate_options_for("norga")
@gate_options_for("norga_headwise")
@dataclass
class NoRGaOptions:
    activation: str = _f("tanh", choices=ACTIVATION_NAMES)  # sigma of eq. 12
    alpha_init: float = _f(1.0)  # authors' code: 1.0
    tau_init: float = _f(1.0)  # authors' code: 1.0


def gate_options(name: str, options: Mapping[str, Any], key: str = "method.gate") -> Dict[str, Any]:
    """Validated options of gate ``name`` with every default filled in (errors name ``key.<option>``)."""
    if name not in GATE_OPTIONS:
        raise ConfigError(f"{key}.name: unknown gate {name!r}; choose one of {sorted(GATE_OPTIONS)}")
    cls = GATE_OPTIONS[name]
    try:
        return dataclasses.asdict(from_dict(cls, dict(options), key))
    except ConfigError as err:
        if "unknown key" not in str(err):
            raise
        allowed = [f.name for f in dataclasses.fields(cls)]
        hint = (f" (gate {name!r} takes {allowed or 'no options'}; to switch gates replace the whole section, e.g. "
                f"--set '{key}={{name: {name}}}')")
        raise ConfigError.listing([p + hint if "unknown key" in p else p for p in err.problems]) from None


def validate_gate(spec: Mapping[str, Any], key: str = "method.gate") -> Dict[str, Any]:
    """``{name: ..., options...}`` -> the same with every option's value (defaults filled in), validated."""
    options = {k: v for k, v in spec.items() if k != "name"}
    return {"name": spec["name"], **gate_options(spec["name"], options, key)}
