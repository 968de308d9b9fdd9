"""``--set method.name=OTHER`` on a config of another method: one error suggesting how to switch methods.

The section keeps the old method's keys, which the other method does not take; instead of one "unknown key"
problem per key, :func:`method_switch_problem` says to replace the whole section (``--set 'method={name:
OTHER}'``) or to start from a shipped config of the other method.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

from .fields import ConfigError
from .registry import method_configs
from .schema import DEFAULT_METHOD
from .shipped import shipped_names


def method_switch_problem(before: Any, after: Any, overrides: Sequence[str]) -> Optional[Tuple[str, List[str]]]:
    """(the problem, the keys left) of a ``method.name`` override that leaves keys of the file's method, else None.

    ``before``/``after``: the ``method`` section before and after the overrides; ``overrides``: ``key=value`` items.
    """
    item = next((o for o in reversed(overrides) if o.split("=", 1)[0].strip() == "method.name"), None)
    if item is None or not isinstance(before, dict) or not isinstance(after, dict):
        return None
    old, new = before.get("name", DEFAULT_METHOD), after.get("name")
    known = method_configs()
    if old == new or old not in known or new not in known:
        return None  # an unknown name gets its own error
    allowed = {f.name for f in dataclasses.fields(known[new])}
    left = sorted(key for key in after if key not in allowed)
    if not left:
        return None
    shipped = shipped_config(new)
    start = f", or start from {shipped}" if shipped else ""
    return (f"--set {item.strip()} keeps the keys of {old}'s section that {new} does not take "
            f"({['method.' + key for key in left]}); to switch methods replace the whole section: "
            f"--set 'method={{name: {new}}}' ({new}'s defaults){start}"), left


def shipped_config(method: str) -> Optional[str]:
    """A shipped config of ``method`` as ``--config`` takes it (``configs/smoke/<method>.yaml`` first, else a
    top-level ``configs/<benchmark>_<method>.yaml``); None when there is none."""
    try:
        names = shipped_names()
    except ConfigError:  # an installation without its shipped configs: suggest only the section
        return None
    found = [n for n in names if n == f"smoke/{method}"]
    found += [n for n in names if "/" not in n and n.endswith(f"_{method}")]
    return f"configs/{found[0]}.yaml" if found else None
