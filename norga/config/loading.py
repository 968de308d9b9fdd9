"""YAML files -> a :class:`~norga.config.schema.Config`: ``base:`` includes, ``key.path=value`` overrides."""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from .fields import ConfigError
from .method_switch import method_switch_problem
from .parsing import from_dict
from .registry import same_options, shared_sections
from .schema import Config
from .shipped import config_file

_BOOL = "tag:yaml.org,2002:bool"


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names a key twice (``key``; ``first`` and ``problem_mark``: the marks of both)."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        super().__init__(None, None, f"duplicate key {key!r} (first on line {first.line + 1})", second)
        self.key, self.first = key, first


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 booleans and no duplicate keys.

    YAML 1.1 (PyYAML's default) also reads yes/no/on/off/y/n as booleans, so ``eval_mask_unseen: yes`` or
    ``amp: off`` would silently become a bool; here they stay strings, and a boolean option given one is an
    error that says to write true or false. A key given twice in one mapping (at any level) raises
    :class:`DuplicateKey` instead of PyYAML's silent "the last one wins".
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: Dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<: *anchor' merges may repeat keys by design
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKey(key, seen[key], key_node.start_mark)
                    seen[key] = key_node.start_mark
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    pass
        return super().construct_mapping(node, deep)


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def parse_yaml(text: str) -> Any:
    """YAML text -> Python values, with :class:`ConfigLoader` (YAML 1.2 booleans)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def load_config(path: Optional[Union[str, Path]] = None, overrides: Optional[List[str]] = None) -> Config:
    """Read YAML (or start from defaults), resolve ``base:`` includes, apply ``key.path=value`` overrides, validate.

    ``path`` is a file or the name of a shipped config (:func:`~norga.config.shipped.config_file`: an existing
    file wins). Every problem of the overrides and of the values is reported together, in one :class:`ConfigError`."""
    raw, problems = _resolve(path, overrides)
    try:
        cfg = from_dict(Config, raw, "")
    except ConfigError as err:
        problems += err.problems
    if problems:
        raise ConfigError.listing(problems)
    return cfg


def resolved_mapping(path: Optional[Union[str, Path]] = None, overrides: Optional[List[str]] = None) -> Dict[str, Any]:
    """The config's mapping before validation: the file with its ``base:`` chain, then the ``--set`` overrides."""
    raw, problems = _resolve(path, overrides)
    if problems:
        raise ConfigError.listing(problems)
    return raw


def _resolve(path: Optional[Union[str, Path]], overrides: Optional[List[str]]) -> Tuple[Dict[str, Any], List[str]]:
    """(the mapping of the file and the overrides that apply, the overrides' problems)."""
    raw: Dict[str, Any] = {} if path is None else read_config_file(config_file(path))
    before = copy.deepcopy(raw.get("method"))
    problems: List[str] = []
    for item in overrides or []:
        try:
            _apply_override(raw, item)
        except ConfigError as err:
            problems.extend(err.problems)
    switched = method_switch_problem(before, raw.get("method"), overrides or [])
    if switched:  # the old method's keys would each be one more 'unknown key' problem
        problem, left = switched
        raw["method"] = {key: value for key, value in raw["method"].items() if key not in left}
        problems.append(problem)
    return raw, problems


def read_config_file(path: Path) -> Dict[str, Any]:
    """A config file's mapping with its ``base:`` chain merged in (the file's own values win).

    ``base: other.yaml`` (a path relative to the file) names a config this one
    starts from: mappings merge key by key, every other value (lists too) is
    replaced. A section naming another ``name`` than the base's (another method,
    another gate) replaces the base's section: its keys belong to the other one, except
    the nested sections both methods take (:func:`~norga.config.registry.shared_sections`,
    e.g. the ``tii``/``tap``/``stats`` of ``hideprompt`` and ``hidelora``), which merge.
    """
    merged: Dict[str, Any] = {}
    for _, raw in config_chain(path):
        merged = merge_configs(merged, raw)
    return merged


def config_chain(path: Path, _including: Tuple[Path, ...] = ()) -> List[Tuple[Path, Dict[str, Any]]]:
    """The files of a config, its ``base:`` chain first: (path, its own mapping without ``base``), in merge order."""
    raw = _read_yaml_file(path)
    base = raw.pop("base", None)
    if base is None:
        return [(path, raw)]
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base must be the path of another config file, got {base!r}")
    base_path = (path.parent / base).resolve()
    chain = _including + (path.resolve(),)
    if base_path in chain:
        raise ConfigError(f"{path}: base {base!r} includes itself "
                          f"({' -> '.join(str(p) for p in chain + (base_path,))})")
    if not base_path.is_file():
        raise ConfigError(f"{path}: base config not found: {base_path} (base paths are relative to the file)")
    return config_chain(base_path, chain) + [(path, raw)]


def merge_configs(base: Dict[str, Any], own: Dict[str, Any]) -> Dict[str, Any]:
    """``own`` on top of ``base`` (see :func:`read_config_file`); neither argument is modified."""
    merged = dict(base)
    for key, value in own.items():
        old = merged.get(key)
        renamed = isinstance(old, dict) and isinstance(value, dict) and value.get("name", old.get("name")) != \
            old.get("name") and not (key == "method" and same_options(old.get("name"), value.get("name")))
        # another method or gate: the base's options belong to the other one (unless the two methods share them)
        if isinstance(old, dict) and isinstance(value, dict) and not renamed:
            merged[key] = merge_configs(old, value)
        elif renamed and key == "method":  # another method: only the sections both methods take stay
            kept = {section: old[section] for section in shared_sections(old.get("name"), value.get("name"))
                    if section in old}
            merged[key] = merge_configs(kept, value)
        else:
            merged[key] = value
    return merged


def _yaml_problem(err: yaml.YAMLError) -> str:
    """'line L, column C: problem' of a YAML error (one line)."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return where + " ".join(str(problem).split())


def _read_yaml_file(path: Path) -> Dict[str, Any]:
    """A config file's top-level mapping; every problem is one ConfigError naming the file."""
    if path.is_dir():
        raise ConfigError(f"config path {path} is a folder; give a YAML file, e.g. configs/smoke.yaml")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        raw = parse_yaml(text)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from err
    except DuplicateKey as err:
        raise ConfigError(f"{path}:{err.problem_mark.line + 1}: duplicate key {err.key!r}, first at {path}:"
                          f"{err.first.line + 1}; keep one of them (YAML would silently keep the last)") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML at {_yaml_problem(err)}") from err
    if raw is None:
        raise ConfigError(f"{path} is empty; start from a shipped config, e.g. configs/smoke.yaml")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values")
    return raw


def _apply_override(raw: Dict[str, Any], item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, text = item.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key!r}: {part!r} is not a section")
    try:
        node[parts[-1]] = parse_yaml(text) if text.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {item!r}: the value is not valid YAML ({_yaml_problem(err)})") from err
