"""The points of a sweep: one run folder per grid combination and seed, named from its overrides.

    points = expand(spec, Path("runs/sweep"), extra=["device=cuda"])
    p.name, p.seed, p.folder, p.overrides    # 'method.wtp.epochs=1', 0, runs/sweep/method.wtp.epochs=1/seed0, (...)
    p.train_args(feature_cache)              # the arguments of `norga train` that train it
    command_line(p, nproc=2, nodes=1)        # [python, -m, torch.distributed.run, ..., -m, norga, train, ...]

A point's name is its grid values, ``KEY=VALUE`` joined by ``,`` in the grid's order (characters a file name cannot
hold become ``-``, and then, or beyond 100 characters, 10 hex digits of the SHA-256 of the exact overrides are
appended): the same overrides always give the same folder. Its overrides are the sweep file's ``set``, the grid's
values, ``seed=S``, then the command line's ``--set`` items (which are not part of the name). Torch-free.
"""
from __future__ import annotations

import hashlib
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..config import ConfigError, load_config
from ..config.shipped import shipped_name
from .spec import SweepSpec, grid_points

MAX_NAME = 100
RDZV = "{rdzv_endpoint}"  # a multi-node command's rendezvous endpoint, filled in by the job (its first host)


@dataclass(frozen=True)
class Point:
    """One run of a sweep: ``name`` (the point: its grid values), ``seed``, ``config`` (base config file),
    ``overrides`` (every ``--set`` item, in order) and ``folder`` (``ROOT/<name>/seed<S>``)."""

    name: str
    seed: int
    config: Path
    overrides: Tuple[str, ...]
    folder: Path

    @property
    def label(self) -> str:
        """``<name>/seed<S>``: the run's path below the root (its logs use it too)."""
        return f"{self.name}/seed{self.seed}"

    def load(self):
        """The run's validated config (torch-free); ConfigError naming the point."""
        try:
            return load_config(self.config, list(self.overrides))
        except ConfigError as err:
            raise ConfigError(f"point {self.label}: {err}") from None

    def train_args(self, feature_cache: Optional[Path] = None) -> List[str]:
        """The arguments after ``norga train`` that train this point."""
        args = ["--config", short_path(self.config), "--output-dir", str(self.folder)]
        args += ["--feature-cache", str(feature_cache)] if feature_cache is not None else []
        for item in self.overrides:
            args += ["--set", item]
        return args

    def shell(self, nproc: int = 1, feature_cache: Optional[Path] = None) -> str:
        """The equivalent shell line (``norga train ...``; ``torchrun --nproc_per_node=N -m norga train`` for N > 1)."""
        head = ["norga", "train"] if nproc <= 1 else ["torchrun", f"--nproc_per_node={nproc}", "-m", "norga", "train"]
        return " ".join(shlex.quote(a) for a in head + self.train_args(feature_cache))


def short_path(path: Path) -> str:
    """``path`` relative to the current folder when below it, else a shipped config's name, else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return shipped_name(path) or str(path)


def point_name(values: Dict[str, str]) -> str:
    """The stable folder name of a grid combination ({key: rendered value}; see the module docstring)."""
    exact = ",".join(f"{k}={v}" for k, v in values.items())
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "-", exact).strip(".") or "point"
    if safe == exact and len(exact) <= MAX_NAME:
        return exact
    return f"{safe[:MAX_NAME - 11]}-{hashlib.sha256(exact.encode()).hexdigest()[:10]}"


def expand(spec: SweepSpec, root: Path, extra: Sequence[str] = ()) -> List[Point]:
    """One :class:`Point` per grid combination and seed, combinations in the grid's order, seeds innermost."""
    points = []
    for values in grid_points(spec):
        name = point_name(values)
        for seed in spec.seeds:
            overrides = (*spec.fixed, *(f"{k}={v}" for k, v in values.items()), f"seed={seed}", *extra)
            points.append(Point(name, seed, spec.config, overrides, Path(root) / name / f"seed{seed}"))
    return points


def check_points(points: Sequence) -> List:
    """Every point's config, loaded and checked before anything runs (all problems reported together)."""
    return load_all([point.load for point in points], "point configs")


def load_all(loaders: Sequence[Callable[[], object]], what: str) -> List:
    """Every config ``loaders`` return, each loaded once; all ConfigErrors raised together as one (a single problem
    alone, several as "N <what> do not load: ..." with the first five)."""
    configs, problems = [], []
    for load in loaders:
        try:
            configs.append(load())
        except ConfigError as err:
            problems.append(str(err))
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{len(problems)} {what} do not load: " + "; ".join(problems[:5])
                          + ("; ..." if len(problems) > 5 else ""))
    return configs


def command_line(point: Point, nproc: int = 1, nodes: int = 1, feature_cache: Optional[Path] = None) -> List[str]:
    """The program arguments that train ``point``: ``python -m norga train ...``, or under torchrun
    (``nproc`` processes per node, ``nodes`` nodes: ``--nnodes``, c10d rendezvous at :data:`RDZV`)."""
    train = ["-m", "norga", "train", *point.train_args(feature_cache)]
    if nproc <= 1 and nodes <= 1:
        return [sys.executable, *train]
    run = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--nproc-per-node={nproc}"]
    if nodes > 1:
        rdzv_id = hashlib.sha256(str(point.folder).encode()).hexdigest()[:12]
        run += ["--rdzv-backend=c10d", f"--rdzv-endpoint={RDZV}", f"--rdzv-id={rdzv_id}"]
    return [*run, *train]
