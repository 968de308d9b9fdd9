"""One way to register things by name (gates, methods, checkpoint formats, transform recipes, data sources).

``register_gate = registrar(GATES, "gate", set_name=True)`` gives a decorator
factory: ``@register_gate("norga")`` stores the decorated object in ``GATES``
under that name (a second registration of a name is an error) and, with
``set_name``, sets the object's ``name`` attribute. Imports nothing heavy.
"""
from __future__ import annotations

from typing import Any, Callable, Dict


def registrar(table: Dict[str, Any], kind: str, set_name: bool = False) -> Callable[[str], Callable]:
    """A ``register(name)`` decorator factory writing into ``table``; errors say "<kind> 'x' is already registered"."""

    def register(name: str) -> Callable:
        def wrap(obj):
            if name in table:
                raise ValueError(f"{kind} {name!r} is already registered")
            table[name] = obj
            if set_name:
                obj.name = name
            return obj

        return wrap

    register.__doc__ = f"Decorator: register a {kind} under ``name``."
    return register
