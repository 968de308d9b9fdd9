"""The config layer's error and its field helpers: validation metadata (bounds, choices) on dataclass fields."""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import List, Sequence


class ConfigError(ValueError):
    """A config value is unknown, mistyped or out of range (message names the key path).

    ``problems``: the one-line problems it stands for (one, or several from :meth:`listing`).
    """

    def __init__(self, *args, problems: Sequence[str] = ()):
        super().__init__(*args)
        self.problems: List[str] = list(problems) or [str(args[0]) if args else ""]

    @classmethod
    def listing(cls, problems: Sequence[str]) -> "ConfigError":
        """One error for every problem found: the problem itself, or 'N problems in the config: (1) ...; (2) ...'."""
        if len(problems) == 1:
            return cls(problems[0])
        listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        return cls(f"{len(problems)} problems in the config: {listed}", problems=problems)


def _f(default=dataclasses.MISSING, *, ge=None, gt=None, le=None, choices=None, **kw):
    """Field with validation metadata (ge/gt/le bounds, allowed choices)."""
    meta = {"ge": ge, "gt": gt, "le": le, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


# how a per-epoch lr schedule is stepped (norga.toolkit.schedules): "timm" (scheduler.step(e) after epoch e sets
# epoch e + 1's lr, the HiDe-Prompt, HiDe-LoRA and InfLoRA codes) or "torch" (epoch e trains at f(e))
SCHEDULE_STEPPINGS = ("timm", "torch")


def stepping_field(default: str = "timm"):
    """A method's ``schedule_stepping`` option (one of :data:`SCHEDULE_STEPPINGS`)."""
    return _f(default, choices=SCHEDULE_STEPPINGS)
