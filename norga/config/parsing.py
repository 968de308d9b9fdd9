"""Raw mappings -> typed config dataclasses: every key checked, types coerced, errors naming the key path."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Union

from .fields import ConfigError
from .registry import method_config_class
from .schema import DEFAULT_METHOD, MOVED_KEYS, Config


def config_to_dict(cfg: Config) -> Dict[str, Any]:
    return dataclasses.asdict(cfg)


def from_dict(cls, raw: Dict[str, Any], prefix: str):
    """Build dataclass ``cls`` from ``raw``, validating every key (errors name ``prefix.key``).

    A field with ``metadata["method"]`` is a method section: its dataclass is the
    one registered for ``raw[field]["name"]``.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
    _refuse_moved_keys(raw, prefix)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = prefix or "top level"
        raise ConfigError(f"unknown key(s) {[_join(prefix, k) for k in unknown]} at {where}; "
                          f"allowed: {sorted(fields)}")
    values = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        key = _join(prefix, name)
        if f.metadata.get("method"):
            section = raw[name] if raw[name] is not None else {}
            chosen = section.get("name", DEFAULT_METHOD) if isinstance(section, dict) else None
            values[name] = from_dict(method_config_class(chosen), section, key)
        elif dataclasses.is_dataclass(hints[name]):
            values[name] = from_dict(hints[name], raw[name], key)
        else:
            values[name] = _check_value(key, raw[name], hints[name], f.metadata)
    return cls(**values)


def _refuse_moved_keys(raw: Dict[str, Any], prefix: str) -> None:
    """An old-layout key is an error naming its new place (never silently reinterpreted)."""
    for name in raw:
        key = _join(prefix, name)
        if key in MOVED_KEYS:
            raise ConfigError(f"{key} moved to {MOVED_KEYS[key]} (norga 0.2 config layout: everything a method "
                              f"owns lives under method:); write it as {MOVED_KEYS[key]} (every key: the docs' configs page)")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _check_value(key: str, value: Any, hint, meta) -> Any:
    value = _coerce(key, value, hint)
    if value is None:
        return value
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(f"{key}: {value!r} is not one of {list(meta['choices'])}")
    for bound, ok in (("ge", lambda v, b: v >= b), ("gt", lambda v, b: v > b), ("le", lambda v, b: v <= b)):
        b = meta.get(bound)
        if b is not None and isinstance(value, (int, float)) and not ok(value, b):
            symbol = {"ge": ">=", "gt": ">", "le": "<="}[bound]
            raise ConfigError(f"{key}: must be {symbol} {b}, got {value}")
    return value


def _coerce(key: str, value: Any, hint) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, option)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: {value!r} fits none of the allowed types ({'; '.join(errors)})")
    if origin in (list, List):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            hint_1_1 = (" (yes/no/on/off are YAML 1.1 spellings; norga reads only true and false as booleans)"
                        if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off", "y", "n") else "")
            raise ConfigError(f"{key}: expected true or false, got {value!r}{hint_1_1}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # PyYAML reads 1e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if hint is Any:
        return value
    raise ConfigError(f"{key}: unsupported type {hint}")  # pragma: no cover - schema bug
