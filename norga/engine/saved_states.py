"""Re-evaluation of saved per-task method states: a run folder's checkpoints (``norga eval --run``) or an export's
states (``norga eval --from``), through one loop (:func:`evaluate_states`)."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Tuple

from ..config import Config, config_to_dict, from_dict
from ..methods import build_method
from ..methods.base import Method
from ..models.compilation import compile_mode
from ..models.precision import amp_mode
from ..toolkit.devices import resolve_device
from ..toolkit.distributed import distributed_session, is_main
from ..toolkit.feature_store import open_store
from .eval_config import evaluation_config, requested_config
from .run_identity import trained_config
from .run_inputs import check_eval_weights
from .task_loop import Evaluator, MetricsTracker, build_data, build_vit, method_state, resolve_config

# (method, task) -> (the method's state after that task, the config to record for it)
StateOf = Callable[[Method, int], Tuple[dict, Optional[dict]]]


class _StderrLog:
    """The feature store's warnings during an evaluation (there is no run log to write them to)."""

    @staticmethod
    def warning(line: str) -> None:
        print(line, file=sys.stderr)


def evaluate_states(cfg: Config, tasks: int, state_of: StateOf, feature_cache: Optional[Path] = None) -> dict:
    """metrics.json's content recomputed from the saved states of tasks 0..tasks-1 (at most the benchmark's).

    Row t of the accuracy matrix is evaluated with the state after task t; ``eval_seconds`` holds the evaluation
    time after each task (no training times: nothing is trained here). ``feature_cache``: a frozen-feature store
    (:mod:`norga.toolkit.feature_store`) to read the frozen test features from (and to fill); its summary line is
    printed at the end.
    """
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, resolve_device(cfg.device))
    # opened as the task loop opens it (after the method is built), so a run's store space is found again
    store = open_store(feature_cache, vit, cfg, _StderrLog()) if feature_cache is not None else None
    method.feature_store = store
    tracker = MetricsTracker(cfg, bench, method, None)
    evaluator = Evaluator(cfg, bench, method)
    for t in range(min(tasks, cfg.data.num_tasks)):
        start = time.time()
        state, recorded_config = state_of(method, t)
        method.load_state_dict(state, with_training_state=False)
        with amp_mode(cfg.amp), compile_mode(cfg.compile):
            evaluation = evaluator.seen_tasks(t)
        tracker.record(t, evaluation, time.time() - start, recorded_config)
    metrics = tracker.metrics()
    metrics["eval_seconds"] = metrics.pop("task_seconds")
    if store is not None and is_main():
        print(store.summary())
    return metrics


def evaluate_run(run_dir: Path, config_file: Optional[str] = None, overrides: Sequence[str] = (),
                 feature_cache: Optional[Path] = None) -> dict:
    """Recompute the accuracy matrix of a (partial) run from its verified per-task checkpoints.

    Evaluates with the config the checkpoints were trained with; ``config_file`` / ``overrides`` (``--config`` /
    ``--set``) may change only its evaluation keys (:mod:`norga.engine.eval_config`; ``eval_overrides`` in the
    result). A corrupt checkpoint, one without its checksum file, and backbone weights that are not those the
    checkpoints record (:func:`~norga.engine.run_inputs.check_eval_weights`) are errors naming it; ``eval_seconds``
    holds the evaluation time after each task (no training times: nothing is trained here).
    """
    run, done, trained = trained_config(run_dir)
    requested = requested_config(trained, config_file, list(overrides))
    evaluated, changed = evaluation_config(trained, requested and config_to_dict(resolve_config(requested)))
    cfg = from_dict(Config, evaluated, "")
    check_eval_weights(run, done, cfg.model)  # the weights the checkpoints record, or one RunError

    def checkpoint_state(method: Method, t: int) -> Tuple[dict, Optional[dict]]:
        saved = run.load_checkpoint(t)
        return method_state(saved, method, run), saved.get("config")

    with distributed_session(cfg.device):  # under torchrun each process evaluates a part of every test set
        metrics = evaluate_states(cfg, done, checkpoint_state, feature_cache)
    metrics["eval_overrides"] = changed
    return metrics
