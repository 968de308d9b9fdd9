"""The gates' option schema and the ``method.gate`` config section, torch-free: the one place a gate is validated.

Every registered gate (:mod:`norga.gates.modules`) has a dataclass of its config options (``method.gate: {name:
..., <options>}``), registered here under the gate's name with :func:`gate_options_for` (the built-in gates' are
registered in this module, so a config is checked before torch loads). The prefix methods' config sections call
:func:`gate_section` when the config is read: it checks the section's form, the gate name and every option
(errors name ``method.gate.<key>``) and returns the resolved spec, ``{name, every option's value}``, which the
config keeps and the run builds its :class:`~norga.gates.modules.GateFactory` from without checking it again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping

from ..config.fields import ConfigError, _f
from ..config.parsing import from_dict
from ..registry import registrar

ACTIVATION_NAMES = ("tanh", "sigmoid", "gelu")  # NoRGa eq. 12 sigma; modules.ACTIVATIONS implements each

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


def resolve_gate_spec(spec: Mapping[str, Any], key: str = "method.gate") -> Dict[str, Any]:
    """``{name: ..., options...}`` -> the same with every option's value (defaults filled in), validated."""
    options = {k: v for k, v in spec.items() if k != "name"}
    return {"name": spec["name"], **gate_options(spec["name"], options, key)}


def gate_section(gate: Dict[str, Any], default_name: str, key: str = "method.gate") -> Dict[str, Any]:
    """The ``method.gate`` section of a prefix method, resolved: a section without a name (e.g. only ``--set
    method.gate.activation=gelu``) gets ``default_name``; a non-mapping or a non-string name raises one
    ConfigError showing the expected form; the name and options are checked by :func:`resolve_gate_spec`."""
    if not isinstance(gate, dict):
        raise ConfigError(f"{key}: expected a mapping such as {{name: norga, activation: tanh}}; got {gate!r}")
    if "name" not in gate:
        gate = {"name": default_name, **gate}
    if not isinstance(gate.get("name"), str):
        raise ConfigError(f"{key}: needs a gate name, e.g. {{name: norga, activation: tanh}} or "
                          f"{{name: linear}}; got {gate!r}")
    return resolve_gate_spec(gate, key)
