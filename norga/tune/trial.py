"""One trial: the sampled values as config overrides, one normal run folder per tuning seed, trained through the
engine's own path (:func:`norga.engine.run_training`, as ``norga train``), reporting its running objective after
every task so that Optuna's pruner can stop a poor trial at a task boundary.

A trial's run folders are ``TUNE/trials/NNNN_sS`` (trial number, seed). Its value is the mean over the tuning
seeds of the objective after the last task trained (all tasks, or ``stop_after_tasks`` of the protocol).
Intermediate values are reported at step ``seed_index * num_tasks + task``.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from ..config import Config, load_config
from ..config.loading import resolved_mapping
from ..errors import TrainingDiverged
from .spec import TuneSpec, value_override

WORKER_ATTR = "norga_worker"  # "host:pid" of the process running the trial (its death fails the trial)


class StopAfterTasks(Exception):
    """Raised by the task hook once a protocol's tasks are trained (first_task: after task 0)."""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def suggest(trial, space) -> Dict[str, Any]:
    """{config key: value} sampled by ``trial`` (an optuna Trial) from the spec's space."""
    values = {}
    for param in space:
        if param.kind == "float":
            values[param.key] = trial.suggest_float(param.key, **param.options)
        elif param.kind == "int":
            values[param.key] = trial.suggest_int(param.key, **param.options)
        else:
            values[param.key] = trial.suggest_categorical(param.key, param.options["choices"])
    return values


def config_for(spec: TuneSpec, protocol, values: Dict[str, Any], seed: int) -> Config:
    """The config of one run: the spec's base and ``set``, the values, then (``protocol`` not None: a tuning run)
    the protocol's turning the evaluation sequence into the tuning sequence, and the seed."""
    overrides = spec.overrides + [value_override(k, v) for k, v in values.items()]
    if protocol is not None:
        overrides += protocol.tuning_overrides(spec, dict(resolved_mapping(spec.base, overrides).get("data") or {}))
    return load_config(spec.base, overrides + [f"seed={seed}"])


@dataclass
class TrialRunner:
    """Everything a trial needs besides the Optuna trial: the spec, its protocol (:mod:`norga.tune.protocols`), where
    the trial folders go, and how many tasks a trial trains (None: all)."""

    spec: TuneSpec
    protocol: Any
    trials_dir: Path
    stop_after: Optional[int]

    def __call__(self, trial) -> float:
        import optuna

        trial.set_user_attr(WORKER_ATTR, worker_id())
        values = suggest(trial, self.spec.space)
        scores = []
        for index, seed in enumerate(self.spec.tune_seeds):
            folder = self.trials_dir / f"{trial.number:04d}_s{seed}"
            trial.set_user_attr(f"run_s{seed}", str(folder))
            cfg = config_for(self.spec, self.protocol, values, seed)
            metrics = self._run(trial, cfg, folder, index * cfg.data.num_tasks)
            scores.append(float(metrics[self.spec.metric]))
        value = sum(scores) / len(scores)
        if value != value:  # a NaN objective (e.g. a metric undefined for the tasks trained) cannot be ranked
            raise optuna.TrialPruned(f"objective {self.spec.metric} is NaN")
        return value

    def _run(self, trial, cfg: Config, folder: Path, step0: int) -> dict:
        """Train one run folder, reporting after every task; the metrics after the last task trained."""
        import optuna

        from ..engine import run_training
        from ..outputs import make_output_folder

        seen: Dict[str, dict] = {}

        def on_task_end(task: int, metrics: dict) -> None:
            seen["metrics"] = metrics
            trial.report(float(metrics[self.spec.metric]), step0 + task)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after task {task}")
            if self.stop_after is not None and task + 1 >= self.stop_after:
                raise StopAfterTasks()

        make_output_folder(folder, "--out")
        try:
            return run_training(cfg, folder, on_task_end=on_task_end)
        except StopAfterTasks:
            return seen["metrics"]
        except TrainingDiverged as err:  # a poor configuration, counted as a finished (pruned) trial
            trial.set_user_attr("diverged", str(err))
            raise optuna.TrialPruned(f"diverged: {err}") from err
