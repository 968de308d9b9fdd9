"""Expand selected cells into runs (one ordinary run folder per cell and seed), list them, run what is missing:
a reproduction is a sweep (:mod:`norga.sweep`) over the manifest, each run a sweep point named by its cell.

    runs = expand(cells, Path("runs/repro"), extra=["device=cuda", "amp=bf16"], weights={"ibot21k": "ibot.pth"})
    for r in runs: r.folder, r.status(), r.command(), r.point
    failures = run_all(runs)            # in this process, in order; resumable (finished runs return at once)
    outcomes = launch_all(runs, Path("runs/repro"), launcher="local", jobs=2)   # through a sweep launcher

A run's folder is ``OUT/<cell id>/seed<S>``; it is trained by :func:`norga.engine.run_training` exactly as
``norga train --config CONFIG --output-dir FOLDER --set ...`` would (the command :meth:`Run.command` prints, the
sweep point's own), so a killed grid resumes from each run's last saved task, and folders can be trained elsewhere
and copied in. Its status is the sweep's (:func:`norga.sweep.status.run_state`) in the report's words
(:data:`STATUSES`). Under ``torchrun`` every process walks the same list and each run is one distributed session.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import ConfigError, load_config
from ..errors import NorgaError, TrainingDiverged
from ..sweep.points import Point, load_all
from ..sweep.root import write_root
from ..sweep.run import run_points
from ..sweep.status import read_metrics, run_state  # noqa: F401 - read_metrics: the report reads it from here
from .manifest import Cell, ManifestError

STATUSES = ("complete", "partial", "failed", "missing")
_WORDS = {"done": "complete"}  # the sweep's "done" is the report's "complete"


@dataclass(frozen=True)
class Run:
    cell: Cell
    seed: int
    folder: Path
    overrides: Tuple[str, ...]

    @property
    def point(self) -> Point:
        """This run as a sweep point: named by its cell, trained by the same ``norga train`` command."""
        return Point(self.cell.id, self.seed, self.cell.config_path, self.overrides, self.folder)

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
        return self.point.shell(nproc, feature_cache)


def folder_status(folder: Path) -> str:
    """The state of a run folder (see :class:`Run.status`), read as a sweep reads it."""
    kind = run_state(folder).kind
    return _WORDS.get(kind, kind)


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
    return load_all([run.config for run in runs], "run configs")


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


def record_sweep(runs: Sequence[Run], out: Path) -> None:
    """Write ``OUT/sweep.json`` (the runs as sweep points), so that ``norga sweep status OUT`` reads the grid."""
    write_root(Path(out), [run.point for run in runs], [run.config().data.num_tasks for run in runs], None)


def launch_all(runs: Sequence[Run], out: Path, launcher: str = "local", jobs: int = 1, nproc: int = 1,
               nodes: int = 1, feature_cache: Optional[Path] = None, log=print,
               **options) -> List[Tuple[Run, str, bool]]:
    """Train every run not yet complete through a sweep launcher (``norga sweep``'s: ``local`` processes, ``slurm``,
    ``submitit-local``; logs and exit records in ``OUT/logs/<cell id>/seed<S>/``); returns (run, one-line reason,
    diverged) per run that did not complete, as :func:`run_all` does."""
    by_point = {run.point.label: run for run in runs}
    totals: Dict[str, Optional[int]] = {label: run.config().data.num_tasks for label, run in by_point.items()}
    outcomes = run_points([run.point for run in runs], Path(out), totals, launcher, jobs, nproc, nodes, feature_cache,
                          retry_failed=True, log=log, **options)
    failures = []
    for run in runs:
        state = run_state(run.folder)
        if state.kind != "done" and any(o.returncode is not None for o in outcomes):
            failures.append((run, state.text(), (read_metrics(run.folder) or {}).get("status") == "failed"))
    return failures
