"""A sweep file: a base config, a grid of ``--set`` values and seeds, an output root (docs/sweeps.md).

    config: smoke                   # a config file (relative to this file, else to the current folder) or a
                                    # shipped config's name
    out: runs/sweeps/smoke_grid     # the root: one run folder per point and seed, ROOT/<point>/seed<S>
    set: [data.num_tasks=2]         # overrides of every point (optional)
    grid:                           # KEY: [values]; the points are every combination, in this order
      method.gate.activation: [tanh, sigmoid]
    seeds: [0, 1]                   # default [0]

``load_spec(path)`` reads and checks it (torch-free): an unknown key, an empty grid, a value list that is empty or
not a list, a bad seed is one :class:`SweepError` naming the file and the fix; every point's config is checked
by :func:`norga.sweep.points.check_points` with the config's own checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..config import ConfigError
from ..config.shipped import config_file, shipped_path
from ..errors import NorgaError

KEYS = ("config", "out", "set", "grid", "seeds", "description")


class SweepError(NorgaError):
    """A sweep file or a sweep root that cannot be used as given (the message names the fix)."""


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep file: ``config`` (the base config's path), ``fixed`` (overrides of every point),
    ``grid`` ((key, values) in the file's order), ``seeds``, ``out`` (None: not given), ``path`` (the file)."""

    path: Path
    config: Path
    fixed: Tuple[str, ...]
    grid: Tuple[Tuple[str, Tuple[Any, ...]], ...]
    seeds: Tuple[int, ...]
    out: Optional[Path]


def load_spec(path: Path) -> SweepSpec:
    """Read and check the sweep file ``path`` (a file, else a shipped sweep file's name; see the module docstring)."""
    path = Path(path)
    if not path.is_file() and shipped_path(str(path)) is not None:  # a shipped sweep file's name: sweeps/smoke_grid
        path = shipped_path(str(path))
    if not path.is_file():
        raise SweepError(f"sweep file {path} not found (give the YAML file of a sweep; docs/sweeps.md has an "
                         "example, configs/sweeps/smoke_grid.yaml)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SweepError(f"{path}: invalid YAML{at}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: a sweep file is a mapping with keys {', '.join(KEYS[:5])}; got "
                         f"{type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - set(KEYS))
    if unknown:
        raise SweepError(f"{path}: unknown key(s) {unknown}; a sweep file takes {', '.join(KEYS)}")
    return SweepSpec(path, _config(path, raw.get("config")), _fixed(path, raw.get("set")), _grid(path, raw.get("grid")),
                     _seeds(path, raw.get("seeds", [0])), Path(raw["out"]) if raw.get("out") else None)


def _config(path: Path, given) -> Path:
    if not isinstance(given, str) or not given.strip():
        raise SweepError(f"{path}: config: give the base config, a YAML file or a shipped config's name (e.g. "
                         "config: smoke)")
    beside = path.parent / given
    try:
        return beside if beside.is_file() else config_file(given)
    except ConfigError as err:
        raise SweepError(f"{path}: config: {err}") from None


def _fixed(path: Path, given) -> Tuple[str, ...]:
    given = [] if given is None else given
    if not isinstance(given, list) or not all(isinstance(item, str) and "=" in item for item in given):
        raise SweepError(f"{path}: set: expected a list of KEY=VALUE strings, e.g. set: [data.num_tasks=2]")
    return tuple(given)


def _grid(path: Path, given) -> Tuple[Tuple[str, Tuple[Any, ...]], ...]:
    if not isinstance(given, dict) or not given:
        raise SweepError(f"{path}: grid: is empty; give at least one config key with a list of values, e.g. "
                         "grid: {method.wtp.epochs: [1, 2]}")
    grid = []
    for key, values in given.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"{path}: grid: {key}: expected a non-empty list of values, e.g. {key}: [a, b]")
        if len({render(v) for v in values}) != len(values):
            raise SweepError(f"{path}: grid: {key}: a value is listed twice")
        grid.append((str(key), tuple(values)))
    return tuple(grid)


def _seeds(path: Path, given) -> Tuple[int, ...]:
    seeds = given if isinstance(given, list) else [given]
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise SweepError(f"{path}: seeds: expected a list of distinct integers >= 0, e.g. seeds: [0, 1, 2]")
    return tuple(seeds)


def render(value: Any) -> str:
    """A grid value as the VALUE of ``--set KEY=VALUE`` (YAML: ``true``, ``0.01``, ``{name: l2p}``)."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip().removesuffix("...").strip()


def grid_points(spec: SweepSpec) -> List[Dict[str, str]]:
    """Every combination of the grid's values, as {key: rendered value}, the first key varying slowest."""
    points: List[Dict[str, str]] = [{}]
    for key, values in spec.grid:
        points = [{**p, key: render(v)} for p in points for v in values]
    return points
