"""Continual-learning methods, by registry name (``method.name`` in a config).

A method is two things, both registered under the same name:

* its **config section** — a dataclass subclass of :class:`norga.config.MethodConfig`
  in a torch-free module ``norga/methods/<something>_config.py`` decorated with
  :func:`norga.config.method_config` (every ``*_config`` module here is imported when a
  config is read, so configs are validated before torch loads);
* its **implementation** — a :class:`norga.methods.base.Method` subclass
  decorated with :func:`register_method`, in the module the config names
  (imported only when a run is built).

``build_method(cfg, vit, task_classes, device)`` returns the method object the
task loop drives (README "Architecture").
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Dict

from ..config import METHOD_CONFIGS, METHOD_MODULES, method_config  # noqa: F401 - the section registry
from ..registry import registrar

METHODS: Dict[str, type] = {}  # name -> Method subclass (filled as implementation modules are imported)

# Class decorator: register a :class:`~norga.methods.base.Method` subclass under ``name`` (sets ``cls.name``).
register_method = registrar(METHODS, "method", set_name=True)


def method_class(name: str) -> type:
    """The implementation registered for ``name`` (imports its module)."""
    if name not in METHOD_MODULES:
        raise KeyError(f"unknown method {name!r}; registered: {sorted(METHOD_MODULES)}")
    importlib.import_module(METHOD_MODULES[name])
    if name not in METHODS:
        raise RuntimeError(f"module {METHOD_MODULES[name]} did not register method {name!r} (@register_method)")
    return METHODS[name]


def build_method(cfg, vit, task_classes, device):
    """The method of ``cfg.method.name`` around the timm backbone ``vit``, for the given task split."""
    return method_class(cfg.method.name)(vit, task_classes, cfg, device)


def _import_config_modules() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.endswith("_config"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_config_modules()
