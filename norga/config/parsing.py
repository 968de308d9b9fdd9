"""Raw mappings -> typed config dataclasses: every key checked, types coerced, errors naming the key path."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Union

from .fields import ConfigError
from .registry import method_config_class
from .schema import DEFAULT_METHOD, MOVED_KEYS, Config


def config_to_dict(cfg: Config) -> Dict[str, Any]:
    """The config as plain data; an empty ``logging.trackers`` is left out (config.yaml and the config hash stay
    those of a norga without trackers)."""
    data = dataclasses.asdict(cfg)
    if not data.get("logging", {}).get("trackers", True):
        del data["logging"]["trackers"]
    return data


def from_dict(cls, raw: Dict[str, Any], prefix: str):
    """Build dataclass ``cls`` from ``raw``, validating every key (errors name ``prefix.key``).

    A field with ``metadata["method"]`` is a method section: its dataclass is the
    one registered for ``raw[field]["name"]``. Every problem is found before one
    :class:`ConfigError` lists them all (:meth:`ConfigError.listing`).
    """
    found: List[str] = []
    built = _build(cls, raw, prefix, found)
    if found:
        raise ConfigError.listing(found)
    return built


def _build(cls, raw: Any, prefix: str, found: List[str]):
    """``cls`` built from ``raw``, or None; every problem is appended to ``found``."""
    if not isinstance(raw, dict):
        found.append(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    moved = _moved_key_problems(raw, prefix)
    found += moved
    unknown = sorted(set(raw) - set(fields) - {k for k in raw if _join(prefix, k) in MOVED_KEYS})
    if unknown:
        found.append(f"unknown key(s) {[_join(prefix, k) for k in unknown]} at {prefix or 'top level'}; "
                     f"allowed: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    values, failed = {}, []
    for name in (n for n in fields if n in raw):
        key, before = _join(prefix, name), len(found)
        try:
            value = _field_value(fields[name], hints[name], raw[name], key, found)
        except ConfigError as err:
            found.extend(err.problems)
        if len(found) > before:
            failed.append(key)
        else:
            values[name] = value
    return _construct(cls, values, failed, found) if not (moved or unknown) else None


def _field_value(f, hint, value: Any, key: str, found: List[str]) -> Any:
    """One field's checked value (a section: its dataclass, built with its problems appended to ``found``)."""
    if f.metadata.get("method"):
        section = value if value is not None else {}
        chosen = section.get("name", DEFAULT_METHOD) if isinstance(section, dict) else None
        return _build(method_config_class(chosen), section, key, found)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key, found)
    return _check_value(key, value, hint, f.metadata)


def _construct(cls, values: Dict[str, Any], failed: List[str], found: List[str]):
    """``cls(**values)``; its own checks' problems appended to ``found``. With ``failed`` fields (left at their
    defaults) a check naming one of them is dropped: it would judge the default, not the user's value."""
    try:
        return cls(**values)
    except ConfigError as err:
        found.extend(p for p in err.problems if not any(key in p for key in failed))
        return None


def _moved_key_problems(raw: Dict[str, Any], prefix: str) -> List[str]:
    """An old-layout key is an error naming its new place (never silently reinterpreted)."""
    return [f"{key} moved to {MOVED_KEYS[key]} (norga 0.2 config layout: everything a method owns lives under "
            f"method:); write it as {MOVED_KEYS[key]} (every key: the docs' configs page)"
            for key in (_join(prefix, name) for name in raw) if key in MOVED_KEYS]


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
