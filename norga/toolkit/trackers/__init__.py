"""Experiment trackers: ``logging.trackers: [tensorboard, wandb, mlflow]`` (any subset).

Every tracker receives what the run folder records: the scalars of ``epochs.jsonl``
(tag ``<stage>/<key>``, step = the stage's running epoch count), the accuracy row of
each finished task, the final FA/CA/FM, the resolved config and the run's status
(``complete``, ``failed`` or ``interrupted``). Backends are registered classes
(:func:`register_tracker`); :func:`check_trackers` turns a missing package or a login
problem into one :class:`~norga.errors.ConfigError` line before training starts;
:func:`open_trackers` reopens the same tracker runs on resume (their ids are kept in
``DIR/trackers.json``). A tracker failing mid-run becomes one warning, never a crash.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Sequence

from ...config import ConfigError
from ...outputs import Zone, write_output
from .base import Tracker, TRACKERS, register_tracker
from . import tensorboard, wandb, mlflow  # noqa: F401 - registers the backends

STATE_FILE = "trackers.json"


def check_trackers(names: Sequence[str], logging_cfg=None) -> None:
    """One ConfigError line for an unknown tracker, a missing package or a login problem (nothing is written);
    ``logging_cfg``: the config's ``logging`` section, so that a tracker asked for by the older key
    ``logging.tensorboard: true`` is fixed by that key, not by editing ``logging.trackers``."""
    listed = set(getattr(logging_cfg, "trackers", None) or names)
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"logging.trackers: unknown tracker {name!r}; choose from {', '.join(sorted(TRACKERS))}")
        problem = TRACKERS[name].problem()
        if problem and name not in listed:  # asked for by logging.<name>: true
            problem = problem.replace(f"remove {name} from logging.trackers", f"set logging.{name}=false")
        if problem:
            raise ConfigError(f"logging.trackers: {name}: {problem}")


class TrackerSet:
    """The run's open trackers; every call goes to each of them, a failing one is warned about once and dropped."""

    def __init__(self, trackers: List[Tracker], log=None):
        self.trackers = trackers
        self._log = log

    def _each(self, method: str, *args) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as err:  # noqa: BLE001 - a tracker never stops training
                self.trackers.remove(tracker)
                if self._log is not None:
                    self._log.warning(f"warning: tracker {tracker.name} stopped ({type(err).__name__}: {err}); "
                                      "training goes on, the run folder holds every result")

    def scalars(self, values: Dict[str, float], step: int) -> None:
        self._each("scalars", values, step)

    def task_row(self, task: int, metrics: dict) -> None:
        """After task ``task`` is saved: ``acc_row/task_XX`` = metrics.json's ``acc_matrix[XX][task]`` (row XX of
        the accuracy matrix, one point per finished task) and the running FA/CA/FM, all at step ``task``."""
        matrix = metrics.get("acc_matrix", [])
        values = {f"acc_row/task_{i:02d}": row[task] for i, row in enumerate(matrix)
                  if task < len(row) and isinstance(row[task], (int, float))}
        values.update({f"running/{k}": v for k, v in _scores(metrics).items()})
        self._each("scalars", values, task)

    def finish(self, metrics: dict, status: str) -> None:
        """Final FA/CA/FM (when any task finished) and the run's status; closes every tracker."""
        self._each("finish", _scores(metrics), status)

    def close(self) -> None:
        self._each("close")


def _scores(metrics: dict) -> Dict[str, float]:
    """FA, CA and FM of metrics.json (those present: none before the first task is done)."""
    return {k: metrics[k] for k in ("FA", "CA", "FM") if isinstance(metrics.get(k), (int, float))}


def tracker_names(logging_cfg) -> List[str]:
    """``logging.trackers`` plus ``tensorboard`` when the older key ``logging.tensorboard: true`` is set."""
    names = list(getattr(logging_cfg, "trackers", []) or [])
    if getattr(logging_cfg, "tensorboard", False) and "tensorboard" not in names:
        names.insert(0, "tensorboard")
    return names


def open_trackers(run_dir: Path, names: Sequence[str], config: dict, log=None) -> TrackerSet:
    """Start (or, with ids in ``trackers.json``, resume) each tracker; logs the resolved config to each and,
    to ``log``, the line each tracker gives about where it writes (e.g. MLflow's store)."""
    path = Path(run_dir) / STATE_FILE
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    trackers: List[Tracker] = []
    for name in names:
        try:
            trackers.append(TRACKERS[name](Path(run_dir), config, saved.get(name) or {}))
        except Exception as err:  # noqa: BLE001 - e.g. an unreachable server or a refused store: one line
            TrackerSet(trackers).close()
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"logging.trackers: {name} could not start ({first}); fix it or remove {name} "
                              "from logging.trackers (nothing was trained)") from err
    for tracker in trackers:
        if tracker.where and log is not None:
            log.info(f"{tracker.name}: {tracker.where}")
    state = {**saved, **{t.name: t.state() for t in trackers}}
    if names:
        write_output(path, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode("utf-8"), "--output-dir",
                     Zone(Path(run_dir), frozenset({STATE_FILE})))
    return TrackerSet(trackers, log)


__all__ = ["Tracker", "TRACKERS", "TrackerSet", "register_tracker", "check_trackers", "open_trackers",
           "tracker_names", "STATE_FILE"]
