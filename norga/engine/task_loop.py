"""The task loop: build data and model from a Config, train task by task, evaluate, resume.

``run_training(cfg, output_dir)`` is what ``train.py`` calls; ``evaluate_run``
is what ``eval.py`` calls. A run resumes after its last completed task. The dry
run lives in :mod:`norga.engine.dry_run`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..config import Config, ConfigError, config_to_dict, from_dict
from ..data import build_benchmark
from ..errors import RunError, TrainingDiverged
from ..methods import build_method, method_class
from ..methods.base import Method
from ..models.backbone import backbone_data_config, build_backbone
from ..models.compilation import compile_mode
from ..models.precision import amp_mode
from .problems import Problems
from ..toolkit.devices import resolve_device
from ..toolkit.distributed import distributed_session, is_main, world_size
from ..toolkit.epochlog import epoch_log, progress_line
from ..toolkit.feature_store import open_store
from ..toolkit.trackers import TrackerSet, check_trackers, open_trackers, tracker_names
from .evaluate import evaluate_task
from ..toolkit.heads import class_mask
from .loaders import close_loaders, task_loaders, test_loader  # noqa: F401 - re-exported for callers
from .run_folder import RunDir
from ..toolkit.seeding import seed_everything, task_seed
from ..toolkit.loss_watch import watching
from .lifecycle import (attach_evaluation, chance_warning, check_finite, diverged_to_chance, finished_metrics,
                        saved_evaluation, task_context, write_results, write_status)
from .provenance import (RunConfigMismatch, affects_results, change_line, check_run_config,  # noqa: F401
                         config_history, history_note, with_new_defaults)
from .run_inputs import InputsCheck
from .run_identity import check_config_file, check_same_method, claim_folder, trained_config, verified_configs
from .run_marker import refuse_config_inside
from .shared_folder import opened_run
from .tracker import MetricsTracker


def resolve_config(cfg: Config) -> Config:
    """``cfg`` with the defaults only the method knows filled in (e.g. its gate's options): what config.yaml holds."""
    return dataclasses.replace(cfg, method=method_class(cfg.method.name).resolve_config(cfg.method))


def build_vit(cfg: Config) -> torch.nn.Module:
    """The timm backbone; seeded, so random-init backbones are identical across resumes."""
    seed_everything(cfg.seed)
    m = cfg.model
    kwargs = dict(m.timm_kwargs)
    if cfg.data.image_size is not None:
        kwargs["img_size"] = cfg.data.image_size
    return build_backbone(preset=m.preset, model_name=m.name, checkpoint=m.checkpoint, pretrained=m.pretrained,
                          **kwargs)


def build_data(cfg: Config, vit: torch.nn.Module):
    d = cfg.data
    data_cfg = backbone_data_config(vit)
    image_size = d.image_size or int(data_cfg["input_size"][-1])
    return build_benchmark(
        d.name, d.root, d.num_tasks, classes_per_task=d.classes_per_task, first_task_classes=d.first_task_classes,
        class_order=d.class_order, seed=cfg.seed, image_size=image_size, mean=tuple(data_cfg["mean"]),
        std=tuple(data_cfg["std"]), download=d.download, train_per_class=d.train_per_class,
        test_per_class=d.test_per_class, options=d.options, class_order_rng=d.class_order_rng,
        transforms=d.transforms,
    )


def build_vit_and_data(cfg: Config):
    """(backbone with its weights, benchmark); a weights problem and a data problem are reported together (the
    data is then checked with the architecture alone)."""
    found = Problems()
    vit = found.attempt(lambda: build_vit(cfg))
    arch = vit if vit is not None else _architecture(cfg)
    bench = found.attempt(lambda: build_data(cfg, arch))
    found.raise_any()
    return vit, bench


def _architecture(cfg: Config) -> torch.nn.Module:
    """The backbone without weights (its input size and normalisation for the data)."""
    return build_vit(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, checkpoint=None, pretrained=False)))


class Evaluator:
    """Evaluates a method on every test task seen so far; test loaders and the method's cache live for the run."""

    def __init__(self, cfg: Config, bench, method: Method):
        self.cfg, self.bench, self.method = cfg, bench, method
        self.cache = method.new_eval_cache()
        self.loaders: dict = {}

    def loader(self, task: int) -> DataLoader:
        if task not in self.loaders:
            self.loaders[task] = test_loader(self.cfg, self.bench, task)
        return self.loaders[task]

    def seen_tasks(self, task: int) -> list:
        """Evaluations of tasks 0..``task`` after learning ``task``."""
        seen = class_mask(self.method.num_classes, self.method.seen_classes(task), self.method.device)
        return [evaluate_task(self.method, i, seen, self.loader(i), self.method.device, self.cache,
                              self.cfg.eval_mask_unseen)
                for i in tqdm(range(task + 1), desc="evaluation", leave=False, disable=not is_main())]


def run_training(cfg: Config, output_dir: Path, force: bool = False, feature_cache: Optional[Path] = None,
                 config_file: Optional[str] = None, on_task_end: Optional[Callable[[int, dict], None]] = None) -> dict:
    """Train (or resume) a full run into ``output_dir``; returns metrics.json content.

    Writes only into a new or empty folder or a norga run folder (:mod:`norga.engine.run_marker`; ``config_file``,
    the ``--config`` path, must not lie there under a name norga writes). Holds the folder's lock throughout;
    resumes after the last task whose checkpoint is intact and belongs to the run (:mod:`norga.engine.run_identity`);
    a finished run returns its metrics at once. Model and data are built (and so checked) before anything is
    written into the folder; the marker ``norga-run.json`` is written first. ``feature_cache``: the folder of a
    :mod:`~norga.toolkit.feature_store` for frozen features (None: none). ``on_task_end(t, metrics)``: called once
    task t is saved, with metrics.json's content so far; what it raises (a pruned tuning trial) ends the run there.
    """
    refuse_config_inside(config_file, Path(output_dir))
    cfg = resolve_config(cfg)
    with distributed_session(cfg.device):
        return _train_in_folder(cfg, RunDir(output_dir), force, feature_cache, on_task_end)


def _train_in_folder(cfg: Config, run: RunDir, force: bool, feature_cache: Optional[Path] = None,
                     on_task_end: Optional[Callable[[int, dict], None]] = None) -> dict:
    """run_training in this process (one of torchrun's processes, or the only one)."""
    changes: dict = {}
    inputs = InputsCheck(run, cfg.model, cfg.data.num_tasks, force)  # backbone weights and data split
    # a missing package or login: one line before anything is built
    check_trackers(tracker_names(cfg.logging), cfg.logging)

    def check(state) -> Optional[dict]:
        trained = verified_configs(run, state.done)
        if trained:
            check_config_file(run, trained[-1], "move it away: norga train writes the checkpoints' config again")
        previous = trained[-1] if trained else None
        check_same_method(run, previous, cfg.method.name, state.done - 1)
        changes.update(check_run_config(config_to_dict(cfg), previous, run, state.done, cfg.data.num_tasks, force))
        finished = finished_metrics(run, state, cfg.data.num_tasks)  # checked against the checkpoints
        if finished is None:
            inputs.check_backbone(state.done)  # before building: the weights the last task recorded
        if finished is not None and run.read_config() is None:  # restore a lost config.yaml (checked above)
            run.write_config(config_to_dict(cfg))
        return finished

    with opened_run(run, cfg.data.num_tasks, check) as (run, state, finished):
        if finished is not None:
            return finished
        device = resolve_device(cfg.device)
        vit, bench = build_vit_and_data(cfg)
        method = build_method(cfg, vit, bench.task_classes, device)  # checked before anything is written
        inputs.check_split(state.done, bench.info())  # every process: the split the last task recorded
        stamp = claim_folder(run, config_to_dict(cfg), state.done, inputs.record()) if is_main() else {}
        log = run.logger()
        store = open_store(feature_cache, vit, cfg, log) if feature_cache is not None else None
        method.feature_store = store
        for note in state.notes + inputs.notes:
            log.warning(note if note.startswith("warning:") else f"warning: {note}")
        if any(affects_results(key) for key in changes):
            log.warning(change_line(changes, state.done))
        tracker = MetricsTracker(cfg, bench, method, None, backbone_sha256_16=inputs.record()["backbone_sha256_16"])
        done = _resume(run, method, tracker, state.done, log)
        run.write_config(config_to_dict(cfg), history_note(config_history(tracker.configs + [config_to_dict(cfg)])))
        if not done:
            log.info(f"new run in {run.root}\n{method.summary()}\n{bench.summary()}"
                     + (f"\n{world_size()} processes (torchrun), batch sizes are global" if world_size() > 1 else ""))
        evaluator = Evaluator(cfg, bench, method)
        names = tracker_names(cfg.logging)
        trackers = open_trackers(run.root, names, config_to_dict(cfg), log) if is_main() else TrackerSet([])
        epochs = epoch_log(run.root, False, done, trackers) if is_main() else contextlib.nullcontext()
        with epochs, amp_mode(cfg.amp), compile_mode(cfg.compile), _status_on_stop(run, tracker, log, trackers):
            for t in range(done, bench.num_tasks):
                _train_task(t, cfg, bench, method, tracker, run, evaluator, log, stamp)
                so_far = tracker.metrics()  # what metrics.json holds now: computed once for the trackers and the hook
                trackers.task_row(t, so_far)
                if on_task_end is not None:
                    on_task_end(t, so_far)
                log.info(progress_line(tracker.times, bench.num_tasks))
                if is_main():
                    from ..reports.plots import write_run_plots  # here: matplotlib loads once a run ends
                    write_run_plots(run.root, tracker.metrics(), log)  # never raises: a failed plot is a warning
        trackers.finish(tracker.metrics(), "complete")
        if store is not None:
            log.info(store.summary())
        return tracker.metrics()


def _resume(run: RunDir, method: Method, tracker: "MetricsTracker", done: int, log) -> int:
    """Load the intact checkpoints 0..done-1 and rebuild metrics.json / acc_matrix.csv from their evaluation rows."""
    for t in range(done):
        saved = run.load_checkpoint(t)
        method.load_state_dict(method_state(saved, method, run))
        tracker.record(t, *saved_evaluation(saved), config=saved.get("config"))
    if done:
        write_results(run, tracker)  # restores them if lost, e.g. killed between checkpoint and metrics
        last, total = ("task 0" if done == 1 else f"tasks 0-{done - 1}"), tracker.bench.num_tasks
        log.info(f"resuming after task {done - 1}: {last} done ({done} of {total}), next task {done}"
                 if done < total else f"all {total} tasks done; metrics.json and acc_matrix.csv rebuilt from the "
                 "checkpoints")
    return done


def method_state(saved: dict, method: Method, run: RunDir) -> dict:
    """The method's part of a checkpoint, refusing one written by another method or an older norga."""
    if saved.get("method_name") != method.name or not isinstance(saved.get("method"), dict):
        found = saved.get("method_name") or "an older norga version (0.1 layout)"
        raise RunError(f"{run.root}: checkpoint of task {saved.get('task')} was written by {found}, not by method "
                       f"{method.name!r} of this norga version; use a new --output-dir")
    return saved["method"]


@contextlib.contextmanager
def _status_on_stop(run: RunDir, tracker: "MetricsTracker", log, trackers: TrackerSet) -> Iterator[None]:
    """Around the task loop: a divergence marks the folder ``status: failed``, Ctrl-C/SIGTERM ``interrupted``
    (metrics.json of the saved tasks and a log line, at the task being trained; the trackers get the same status,
    any other error ends them as failed); the error goes on to the caller."""
    try:
        with _trackers_status(trackers, tracker):
            yield
    except TrainingDiverged as err:
        if is_main():
            write_status(run, tracker.metrics(), "failed", tracker.done, str(err))
            log.error(f"run failed in task {tracker.done}: {err}")
        raise
    except KeyboardInterrupt:
        _record_saved_tasks(run, tracker)
        if is_main() and tracker.done < tracker.bench.num_tasks:
            reason = f"interrupted (Ctrl-C or SIGTERM) during task {tracker.done}; the tasks before it are saved"
            log.warning(f"{reason}; run the same command again to resume with task {tracker.done}")
            write_status(run, tracker.metrics(), "interrupted", tracker.done, reason)
        raise


@contextlib.contextmanager
def _trackers_status(trackers: TrackerSet, tracker: "MetricsTracker") -> Iterator[None]:
    """Ends the trackers as ``interrupted`` on Ctrl-C/SIGTERM, ``failed`` on any other error."""
    try:
        yield
    except KeyboardInterrupt:
        trackers.finish(tracker.metrics(), "interrupted")
        raise
    except BaseException:
        trackers.finish(tracker.metrics(), "failed")
        raise


def _record_saved_tasks(run: RunDir, tracker: "MetricsTracker") -> None:
    """Record the tasks whose checkpoint is intact on disk but not yet in the tracker: an interrupt between
    ``save_checkpoint`` and ``tracker.record`` (the task is saved, and resuming starts after it)."""
    for t in range(tracker.done, run.scan(tracker.bench.num_tasks).done):
        saved = run.load_checkpoint(t)
        tracker.record(t, *saved_evaluation(saved), config=saved.get("config"))


def _train_task(t: int, cfg: Config, bench, method: Method, tracker: "MetricsTracker", run: RunDir,
                evaluator: Evaluator, log, stamp: dict) -> None:
    """Learn and evaluate task t; checkpoint (with its evaluation row and ``stamp``: the run's id and config hash),
    then metrics, then the log line. ``stamp``: ``run`` (id, config hash) and ``inputs`` (weights, split)."""
    start = time.time()
    with task_context(t):
        loaders = task_loaders(cfg, bench, t, method.train_batch_size, evaluator.loader(t))
        seed_everything(task_seed(cfg.seed, t))  # every task starts from global RNG state (seed, task): resumable
        try:
            with watching() as epochs:
                method.learn_task(t, loaders)
        finally:
            close_loaders(loaders)  # no idle training-loader workers outlive the task
    evaluation = evaluator.seen_tasks(t)
    seconds = time.time() - start
    failure = diverged_to_chance(t, evaluation[t], len(bench.task_classes[t]), epochs)
    if failure:
        raise TrainingDiverged(failure)
    state = {"task": t, "method_name": cfg.method.name, "method": method.state_dict(t), **stamp}
    check_finite(state, t)
    run.save_checkpoint(t, attach_evaluation(state, evaluation, seconds, config_to_dict(cfg)))
    tracker.record(t, evaluation, seconds, config_to_dict(cfg))  # after the checkpoint: the tracker holds saved tasks
    write_results(run, tracker)
    log.info(tracker.summary_line(t))
    warning = chance_warning(t, evaluation[t], len(bench.task_classes[t]))
    if warning:
        log.warning(warning)


def load_run_config(run_dir: Path) -> Config:
    """The Config a run folder's checkpoints were trained with (:func:`trained_config`)."""
    _, _, trained = trained_config(run_dir)
    try:
        return from_dict(Config, with_new_defaults(trained), "")
    except ConfigError as err:
        raise ConfigError(f"{run_dir}: the config its checkpoints record: {err}") from err
