"""Where each value of a resolved config comes from: a file (and line), a ``base:`` file, ``--set``, or the default.

    for line in resolved_lines("configs/cifar100_norga.yaml", ["seed=1"]): print(line)

prints the config fully resolved as YAML, every value with its origin as a comment
(``norga configs resolve`` and ``norga train --dry-run --print-config``). The value of a key present in the
mapping after the merge and the overrides comes from the last source that set it (the later file of the
``base:`` chain, then the overrides in order); a key absent from it is the schema's default.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import yaml

from .loading import ConfigLoader, config_chain, load_config, parse_yaml, resolved_mapping
from .parsing import config_to_dict
from .shipped import config_file

Leaves = Dict[Tuple[str, ...], Any]  # key path -> value (a mapping is walked into; anything else is a leaf)


def leaves(mapping: Dict[str, Any], prefix: Tuple[str, ...] = ()) -> Leaves:
    """Every leaf of a nested mapping by key path (an empty mapping is a leaf)."""
    out: Leaves = {}
    for key, value in mapping.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and value:
            out.update(leaves(value, path))
        else:
            out[path] = value
    return out


def key_lines(path: Path) -> Dict[Tuple[str, ...], int]:
    """Key path -> 1-based line of the key in the YAML file ``path``."""
    lines: Dict[Tuple[str, ...], int] = {}

    def walk(node: Any, prefix: Tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = prefix + (str(key_node.value),)
                lines[key] = key_node.start_mark.line + 1
                walk(value_node, key)

    walk(yaml.compose(path.read_text(encoding="utf-8"), Loader=ConfigLoader), ())
    return lines


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when below it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _sources(path: Optional[Path], overrides: Sequence[str]) -> List[Dict[Tuple[str, ...], str]]:
    """Per source in merge order: the key paths it sets -> the origin text."""
    sources = []
    chain = config_chain(path) if path is not None else []
    for index, (file, raw) in enumerate(chain):
        lines, role = key_lines(file), "" if index == len(chain) - 1 else " (base)"
        sources.append({key: f"{_shown(file)}:{_line(lines, key)}{role}" for key in leaves(raw)})
    for item in overrides:
        key, _, text = item.partition("=")
        value = parse_yaml(text) if text.strip() else None
        nested: Dict[str, Any] = {}
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        sources.append({leaf: f"--set {item}" for leaf in leaves(nested)})
    return sources


def _line(lines: Dict[Tuple[str, ...], int], key: Tuple[str, ...]) -> int:
    """The line of ``key``, or of its nearest enclosing key (a value inside a flow mapping has its own)."""
    while key not in lines and len(key) > 1:
        key = key[:-1]
    return lines.get(key, 1)


def origin_of(key: Tuple[str, ...], sources: List[Dict[Tuple[str, ...], str]], raw: Dict[str, Any]) -> str:
    """The origin of the resolved value at ``key``: the last source setting it (or a section holding it) when
    the merged mapping ``raw`` holds it, else the default."""
    node: Any = raw
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return "default"
        node = node[part]
    for source in reversed(sources):
        for depth in range(len(key), 0, -1):
            if key[:depth] in source:
                return source[key[:depth]]
    return "default"


def resolved_lines(path: Optional[Union[str, Path]], overrides: Sequence[str] = ()) -> List[str]:
    """The resolved config as YAML lines, each value followed by ``# <origin>`` (validated first: a config with
    problems raises the one ConfigError listing them)."""
    path = config_file(path) if path is not None else None
    cfg = load_config(path, list(overrides))
    raw = resolved_mapping(path, list(overrides))
    sources = _sources(path, list(overrides))
    values = leaves(config_to_dict(cfg))
    rows = list(_rows(config_to_dict(cfg), (), values, lambda key: origin_of(key, sources, raw)))
    width = max(len(text) for text, origin in rows if origin is not None)
    return [text if origin is None else f"{text.ljust(width)}  # {origin}" for text, origin in rows]


def _rows(mapping: Dict[str, Any], prefix: Tuple[str, ...], values: Leaves, origin) -> Iterator[Tuple[str, Any]]:
    """(YAML text, origin or None for a section header) per line of ``mapping``."""
    indent = "  " * len(prefix)
    for key, value in mapping.items():
        path = prefix + (str(key),)
        if path in values:
            yield f"{indent}{key}: {flow(value)}", origin(path)
        else:
            yield f"{indent}{key}:", None
            yield from _rows(value, path, values, origin)


def flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style) that reads back as the same value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    return text[:-len("\n...")].strip() if text.endswith("\n...") else text
