"""Expand selected cells into runs (one ordinary run folder per cell and seed), list them, run what is missing.

    runs = expand(cells, Path("runs/repro"), extra=["device=cuda", "amp=bf16"], weights={"ibot21k": "ibot.pth"})
    for r in runs: r.folder, r.status(), r.command()
    failures = run_all(runs)            # resumable: run_training skips finished runs and resumes partial ones

A run's folder is ``OUT/<cell id>/seed<S>``; it is trained by :func:`norga.engine.run_training` exactly as
``norga train --config CONFIG --output-dir FOLDER --set ...`` would (the command :meth:`Run.command` prints), so a
killed grid resumes from each run's last saved task, and folders can be trained elsewhere and copied in.
Under ``torchrun`` every process walks the same list and each run is one distributed session.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import ConfigError, load_config
from ..config.shipped import shipped_name
from ..errors import NorgaError, TrainingDiverged
from .manifest import Cell, ManifestError

STATUSES = ("complete", "partial", "failed", "missing")


@dataclass(frozen=True)
class Run:
    cell: Cell
    seed: int
    folder: Path
    overrides: Tuple[str, ...]

    def config(self):
        """The run's validated config (torch-free); raises ConfigError naming the cell."""
        try:
            return load_config(self.cell.config_path, list(self.overrides))
        except ConfigError as err:
            raise ConfigError(f"cell {self.cell.id} seed {self.seed}: {err}") from None

    def status(self) -> str:
        """``complete`` (counts in the report), ``failed``, ``partial`` (started: resumes) or ``missing``."""
        return folder_status(self.folder)

    def command(self, nproc: int = 1, feature_cache: Optional[Path] = None) -> str:
        """The equivalent ``norga train`` command line (``torchrun --nproc_per_node N -m norga train`` for N > 1)."""
        head = ["norga", "train"] if nproc <= 1 else ["torchrun", f"--nproc_per_node={nproc}", "-m", "norga", "train"]
        args = ["--config", _short(self.cell.config_path), "--output-dir", str(self.folder)]
        args += ["--feature-cache", str(feature_cache)] if feature_cache is not None else []
        for item in self.overrides:
            args += ["--set", item]
        return " ".join(shlex.quote(a) for a in head + args)


def _short(path: Path) -> str:
    """``path`` relative to the current folder when it is below it (readable commands), else a shipped config's
    name (the same on every machine with norga installed), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return shipped_name(path) or str(path)


def folder_status(folder: Path) -> str:
    """The state of a run folder from its ``metrics.json`` (see :class:`Run.status`)."""
    metrics = read_metrics(folder)
    if metrics is None:
        return "partial" if folder.is_dir() and any(folder.iterdir()) else "missing"
    status = metrics.get("status")
    if status == "failed":
        return "failed"
    finished = metrics.get("completed_tasks") == metrics.get("num_tasks") and metrics.get("num_tasks")
    return "complete" if finished and status in (None, "complete") else "partial"


def read_metrics(folder: Path) -> Optional[dict]:
    """``folder/metrics.json`` as a dict, or None when absent or unreadable."""
    try:
        return json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def parse_pairs(items: Sequence[str], option: str, valid: Sequence[str], example: str) -> Dict[str, str]:
    """``["NAME=PATH", ...]`` of ``option`` -> {NAME: PATH}; names checked against ``valid`` (when given)."""
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise ManifestError(f"{option}: expected NAME=PATH, e.g. {example}, got {item!r}")
        if valid and name not in valid:
            raise ManifestError(f"{option}: unknown name {name!r}; valid: {', '.join(sorted(valid))}")
        out[name] = path
    return out


def expand(cells: Sequence[Cell], out: Path, extra: Sequence[str] = (), weights: Mapping[str, str] = {},
           seeds: Optional[int] = None, data: Mapping[str, str] = {}) -> List[Run]:
    """One :class:`Run` per runnable cell and seed (the first ``seeds`` seeds when given), in manifest order;
    ``weights`` (row -> checkpoint) and ``data`` (benchmark -> data.root) add their overrides before ``extra``."""
    runs = []
    for cell in cells:
        if not cell.runnable:
            continue
        paths = [f"model.checkpoint={weights[cell.backbone]}"] if cell.backbone in weights else []
        paths += [f"data.root={data[cell.benchmark]}"] if cell.benchmark in data else []
        for seed in cell.seeds[:seeds]:
            runs.append(Run(cell, seed, Path(out) / cell.id / f"seed{seed}",
                            tuple(cell.run_overrides(seed, [*paths, *extra]))))
    return runs


def check_configs(runs: Sequence[Run]) -> List:
    """Every run's config, loaded and validated before anything runs (all problems reported together)."""
    configs, problems = [], []
    for run in runs:
        try:
            configs.append(run.config())
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError(f"{len(problems)} run config(s) do not load: " + "; ".join(problems[:5])
                          + ("; ..." if len(problems) > 5 else ""))
    return configs


def run_all(runs: Sequence[Run], log=print, feature_cache: Optional[Path] = None) -> List[Tuple[Run, str, bool]]:
    """Train every run not yet complete, in order; a run that fails is reported and the next one starts.
    ``feature_cache``: the frozen-feature store every run reads and fills (``norga train --feature-cache``), so
    the seeds and cells of one backbone and data set compute each frozen feature once.

    Returns (run, one-line reason, diverged) per failed run. Finished runs return at once inside
    ``run_training`` (which also holds each folder's lock, so two machines never train one folder at the same
    time). Under torchrun no run is skipped here: every process enters each run_training together.
    """
    from ..engine import run_training

    failures = []
    for i, run in enumerate(runs, 1):
        before = run.status()
        if before == "complete" and int(os.environ.get("WORLD_SIZE", "1")) == 1:
            log(f"[{i}/{len(runs)}] {run.cell.id} seed {run.seed}: complete, skipped")
            continue
        log(f"[{i}/{len(runs)}] {run.cell.id} seed {run.seed}: {'resuming' if before == 'partial' else 'training'}"
            f" -> {run.folder}")
        try:
            m = run_training(run.config(), run.folder, feature_cache=feature_cache)
            log(f"    FA {100 * m['FA']:.2f}  CA {100 * m['CA']:.2f}  FM {100 * m['FM']:.2f}")
        except (NorgaError, ConfigError, TrainingDiverged) as err:
            reason = " ".join(str(err).split())
            print(f"error: {run.cell.id} seed {run.seed}: {reason}", file=sys.stderr)
            failures.append((run, reason, isinstance(err, TrainingDiverged)))
    return failures
