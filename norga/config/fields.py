"""The config layer's error and its field helper: validation metadata (bounds, choices) on dataclass fields."""
from __future__ import annotations

import dataclasses
from dataclasses import field


class ConfigError(ValueError):
    """A config value is unknown, mistyped or out of range (message names the key path)."""


def _f(default=dataclasses.MISSING, *, ge=None, gt=None, le=None, choices=None, **kw):
    """Field with validation metadata (ge/gt/le bounds, allowed choices)."""
    meta = {"ge": ge, "gt": gt, "le": le, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)
