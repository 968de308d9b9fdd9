"""Safe run lifecycle around the task loop: lock, integrity scan, results derived from checkpoints, sanity checks.

``runner.run_training`` uses these helpers so that

* one process at a time trains into a folder (:func:`open_run` holds ``DIR/.lock``);
* resuming starts after the last *intact* task (checksums verified, an
  interrupted or corrupt checkpoint is named in the log and its task trained again);
* ``metrics.json`` / ``acc_matrix.csv`` are rebuilt from the evaluation row each
  checkpoint carries (:func:`attach_evaluation` / :func:`saved_evaluation`), so losing
  them, or a crash between the checkpoint and the metrics write, loses nothing;
* a finished run answers at once (:func:`finished_metrics`) without building model or data;
* a diverged task never becomes a checkpoint (:func:`check_finite`, :func:`diverged_to_chance`), a task at
  chance accuracy is flagged (:func:`chance_warning`), a non-finite loss names its task
  (:func:`task_context`), and the folder of a diverged run says ``status: failed`` (:func:`write_status`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Iterator, List, Optional

import torch

from ..errors import NorgaError, TrainingDiverged
from ..toolkit.loss_watch import EXPLOSION_FACTOR, EpochLoss, exploded
from .evaluate import TaskEvaluation
from .run_folder import RunDir, RunState
from .run_marker import recognise_folder
from .run_truth import metrics_problem


@contextlib.contextmanager
def open_run(run: RunDir, num_tasks: int) -> Iterator[RunState]:
    """Recognise the folder (before anything is written: :func:`~norga.engine.run_marker.recognise_folder`), create
    it if needed, take its lock, drop stale temp files, scan the checkpoints.

    A folder created here is removed again on exit if nothing was written into it
    (e.g. the backbone weights or the data were unavailable).
    """
    recognise_folder(run.root)  # RunError for a folder that is neither new, empty nor a norga run
    created = run.ensure_folder()
    try:
        with run.lock():
            run.clean_temp_files()
            yield run.scan(num_tasks)
    finally:
        if created:
            with contextlib.suppress(OSError):
                run.root.rmdir()  # only succeeds when empty


def finished_metrics(run: RunDir, state: RunState, num_tasks: int) -> Optional[dict]:
    """metrics.json of a run whose ``num_tasks`` checkpoints are all intact, if it describes all of them and agrees
    with their evaluation rows (:mod:`norga.engine.run_truth`; else a note says it is rebuilt)."""
    if state.done != num_tasks or state.notes:
        return None
    metrics = run.read_metrics_file()
    if not metrics or metrics.get("completed_tasks") != num_tasks or metrics.get("num_tasks") != num_tasks:
        return None
    if not all(isinstance(metrics.get(k), (int, float)) for k in ("FA", "CA", "FM")):
        return None
    if metrics.get("status", "complete") != "complete":  # e.g. interrupted while writing plots: rebuilt
        return None
    problem = metrics_problem(run, metrics)  # checkpoints are the truth: an edited file is rebuilt from them
    if problem:
        state.notes.append(f"metrics.json {problem}; it is rebuilt from the checkpoints")
        return None
    return metrics


def attach_evaluation(state: dict, evaluation: List[TaskEvaluation], seconds: float, config: dict) -> dict:
    """The task's checkpoint state plus its evaluation row and the resolved config (plain values, loadable
    with weights_only): metrics.json and the config check can be rebuilt from checkpoints alone."""
    rows = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(e).items()}
            for e in evaluation]
    return {**state, "evaluation": {"tasks": rows, "seconds": float(seconds)}, "config": config}


def saved_evaluation(state: dict) -> tuple:
    """(evaluations of tasks 0..t, seconds) stored in checkpoint t by :func:`attach_evaluation`."""
    saved = state.get("evaluation")
    if not isinstance(saved, dict):
        raise NorgaError(f"checkpoint of task {state.get('task')} has no evaluation row (written by an older "
                         "norga version); use a new --output-dir")
    names = {f.name for f in dataclasses.fields(TaskEvaluation)}
    rows = [TaskEvaluation(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in row.items() if k in names})
            for row in saved["tasks"]]
    return rows, float(saved["seconds"])


def _tensors(obj, prefix: str = "") -> Iterator[tuple]:
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))


def check_finite(state: dict, task: int) -> None:
    """Refuse to checkpoint a task whose learned tensors hold NaN or inf (training diverged)."""
    for name, tensor in _tensors({k: v for k, v in state.items() if k != "rng"}):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise TrainingDiverged(f"training diverged in task {task}: {name} holds NaN or inf after training; "
                                   "lower the learning rates (method.*.lr); the task was not saved, earlier tasks "
                                   "are kept")


def at_chance(evaluation: TaskEvaluation, num_classes: int) -> bool:
    """Whether the task, even with its true task id, is classified at about chance level (within a tenth of the
    way from chance to perfect), for a task of at least two classes."""
    if num_classes < 2:
        return False
    chance = 1.0 / num_classes
    accuracy = evaluation.til_accuracy
    return not math.isfinite(accuracy) or accuracy <= chance + 0.1 * (1 - chance)


def chance_warning(task: int, evaluation: TaskEvaluation, num_classes: int) -> Optional[str]:
    """A warning when the task, even with its true task id, is classified at about chance level."""
    if at_chance(evaluation, num_classes):
        chance, accuracy = 1.0 / num_classes, evaluation.til_accuracy
        return (f"warning: task {task} is at chance level: accuracy {accuracy:.3f} with the true task id, chance "
                f"{chance:.3f} for {num_classes} classes; training may have diverged (learning rates too high? "
                "method.*.lr) or the data carry no signal")
    return None


def diverged_to_chance(task: int, evaluation: TaskEvaluation, num_classes: int,
                       epochs: List[EpochLoss]) -> Optional[str]:
    """Why task ``task`` failed, or None: it ended at chance level with its true task id after the loss of one of
    its training stages exploded (:func:`norga.toolkit.loss_watch.exploded`; ``epochs``: the task's epochs)."""
    if not at_chance(evaluation, num_classes):
        return None
    bad = exploded(epochs, num_classes)
    if bad is None:
        return None
    limit = EXPLOSION_FACTOR * math.log(max(num_classes, 2))
    return (f"training diverged in task {task}: the loss of stage {bad.stage} reached {bad.loss:.3g} in epoch "
            f"{bad.epoch} (above {limit:.0f} = {EXPLOSION_FACTOR:.0f} ln {num_classes}) and the task ended at chance "
            f"level (accuracy {evaluation.til_accuracy:.3f} with its true task id, chance {1 / num_classes:.3f}); "
            f"lower {bad.lr_key or 'the learning rates (method.*.lr)'}; the task was not saved, earlier tasks are kept")


def write_status(run: RunDir, metrics: dict, status: str, task: int, reason: str) -> dict:
    """metrics.json of the saved tasks marked ``status`` ("failed" or "interrupted") at ``task`` with ``reason``."""
    marked = {**metrics, "status": status, "stopped": {"task": task, "reason": reason}}
    run.write_metrics(marked)
    return marked


@contextlib.contextmanager
def task_context(task: int) -> Iterator[None]:
    """Attach the task index to a non-finite-loss error; name a failed statistics fit as divergence."""
    try:
        yield
    except TrainingDiverged as err:
        if err.task is None:
            err.task = task
        raise
    except torch.linalg.LinAlgError as err:  # Cholesky of a class covariance built from NaN/inf/degenerate features
        raise TrainingDiverged(f"training diverged in task {task}: a class covariance of the Gaussian statistics "
                               "is not positive-definite (the features are non-finite or degenerate); lower the "
                               "learning rates (method.*.lr), or raise method.stats.ridge; earlier tasks are kept"
                               ) from err
    except RuntimeError as err:  # e.g. an optimiser step with lr ~ 1e38: "cannot be converted ... without overflow"
        if "overflow" not in str(err):
            raise
        raise TrainingDiverged(f"training diverged in task {task}: a value overflowed float32 in an optimiser "
                               f"step ({str(err).strip().splitlines()[0]}); lower the learning rates "
                               "(method.*.lr); earlier tasks are kept") from err


def write_results(run: RunDir, tracker) -> None:
    """metrics.json and acc_matrix.csv from the tracker (always after the checkpoint they describe)."""
    run.write_metrics(tracker.metrics())
    run.write_matrix_csv(tracker.cil)
