"""The plug-in registry of method config sections, below the methods: reading a config never imports a method.

A plug-in registry: :func:`method_configs` imports the package ``norga.methods`` by name at run time
(``importlib``), a declared climb over the layers (``PLUGIN_REGISTRIES`` in ``tests/test_layers.py``) whose only
effect is that the torch-free ``norga/methods/*_config.py`` modules register their sections here.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Dict, Tuple

from .fields import ConfigError


# The registry of method config sections. It lives here, below the methods, so that reading a config never
# imports a method; the torch-free ``norga/methods/*_config.py`` modules register into it with
# :func:`method_config` when the package ``norga.methods`` is imported, which happens by name (plugin
# discovery) the first time a method section is needed.
METHOD_CONFIGS: Dict[str, type] = {}  # name -> config dataclass
METHOD_MODULES: Dict[str, str] = {}  # name -> module that registers the implementation
METHODS_PACKAGE = "norga.methods"


def method_config(name: str, module: str):
    """Class decorator: register a method's config dataclass and the module of its implementation."""

    def wrap(cls: type) -> type:
        if name in METHOD_CONFIGS:
            raise ValueError(f"method config {name!r} is already registered")
        METHOD_CONFIGS[name] = cls
        METHOD_MODULES[name] = module
        return cls

    return wrap


def method_configs() -> Dict[str, type]:
    """Every registered method config section, by name (imports the torch-free ``*_config`` modules once)."""
    importlib.import_module(METHODS_PACKAGE)
    return METHOD_CONFIGS


def method_config_class(name: str) -> type:
    """The config dataclass registered for method ``name``."""
    known = method_configs()
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"method.name: unknown method {name!r}; choose one of {sorted(known)} "
                          "('norga list' describes them)")
    return known[name]


def same_options(a: Any, b: Any) -> bool:
    """Whether registered methods ``a`` and ``b`` read the same options (one's config section extends the other's, e.g.
    ``norga`` and ``hideprompt``): a child config may then switch between them and keep its base's values."""
    known = method_configs()
    if not (isinstance(a, str) and isinstance(b, str) and a in known and b in known):
        return False
    return issubclass(known[a], known[b]) or issubclass(known[b], known[a])


def shared_sections(a: Any, b: Any) -> Tuple[str, ...]:
    """The nested sections (e.g. ``tii``, ``tap``, ``stats``) that registered methods ``a`` and ``b`` both declare as
    the same kind of options (one section's dataclass extends the other's): a child config that switches from ``a``
    to ``b`` keeps its base's values for them. Empty for an unknown name."""
    known = method_configs()
    if not (isinstance(a, str) and isinstance(b, str) and a in known and b in known):
        return ()
    mine, theirs = _section_types(known[a]), _section_types(known[b])
    return tuple(name for name, kind in mine.items()
                 if name in theirs and (issubclass(kind, theirs[name]) or issubclass(theirs[name], kind)))


def _section_types(cls: type) -> Dict[str, type]:
    """A method config's nested sections: field name -> the dataclass its default is built from."""
    return {f.name: f.default_factory for f in dataclasses.fields(cls)
            if isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory)}
