"""The ``method.gate`` section shared by the prefix-tuning methods (torch-free; read before torch loads).

``gate: {name: <registered gate>, <that gate's options>}`` — e.g. ``{name: linear}`` (plain prefix tuning)
or ``{name: norga, activation: tanh}``. The name and the options are checked here, when the config is read
and before torch loads, against the options registered in :mod:`norga.config.gate_options`.
"""
from __future__ import annotations

from typing import Any, Dict

from ..config import ConfigError
from ..config.gate_options import validate_gate


def gate_section(gate: Dict[str, Any], default_name: str, key: str = "method.gate") -> Dict[str, Any]:
    """``gate`` with a name: a section without one (e.g. only ``--set method.gate.activation=gelu``)
    gets ``default_name``; a non-string name raises one ConfigError showing the expected form."""
    if not isinstance(gate, dict):
        raise ConfigError(f"{key}: expected a mapping such as {{name: norga, activation: tanh}}; got {gate!r}")
    if "name" not in gate:
        gate = {"name": default_name, **gate}
    if not isinstance(gate.get("name"), str):
        raise ConfigError(f"{key}: needs a gate name, e.g. {{name: norga, activation: tanh}} or "
                          f"{{name: linear}}; got {gate!r}")
    validate_gate(gate, key)  # raises naming the key; the section keeps only what the user wrote
    return gate
