"""The task loop: build data and model from a Config, train task by task, evaluate, resume.

``run_training(cfg, output_dir)`` is what ``train.py`` calls; ``evaluate_run``
is what ``eval.py`` calls. A run resumes after its last completed task.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import platform
import time
from pathlib import Path
from typing import Optional

import numpy
import timm
import torch
import torchvision
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..config import MOVED_KEYS, Config, ConfigError, config_to_dict, from_dict
from ..data import build_benchmark
from ..errors import RunError
from ..methods import build_method, method_class
from ..methods.base import Method, TaskLoaders
from ..metrics import empty_matrix, summarize
from ..models.backbone import BACKBONE_PRESETS, backbone_data_config, build_backbone, hub_weights_status
from ..models.precision import amp_mode
from ..plots import write_run_plots
from .devices import loader_options, resolve_device
from .epochlog import epoch_log, progress_line
from .evaluate import evaluate_task
from .heads import class_mask
from .rundir import RunDir, code_version
from .seeding import seed_everything, task_generator
from .runstate import (attach_evaluation, chance_warning, check_finite, finished_metrics, open_run,
                       saved_evaluation, task_context, write_results)


class RunConfigMismatch(RunError):
    """The output folder holds a run with another config (use --force to continue anyway)."""


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


def task_loaders(cfg: Config, bench, task: int, train_batch_size: int,
                 test: Optional[DataLoader] = None) -> TaskLoaders:
    """Augmented train (shuffled by a (seed, task) generator), un-augmented train and test loaders of ``task``
    (``test``: an existing test loader of that task to reuse)."""
    common = loader_options(cfg)
    train = DataLoader(bench.train_set(task), batch_size=train_batch_size, shuffle=True, drop_last=False,
                       generator=task_generator(cfg.seed, task, 0), **common)
    plain = DataLoader(bench.train_set(task, train_transform=False), batch_size=cfg.eval_batch_size, **common)
    return TaskLoaders(train, plain, test if test is not None else test_loader(cfg, bench, task))


def test_loader(cfg: Config, bench, task: int) -> DataLoader:
    return DataLoader(bench.test_set(task), batch_size=cfg.eval_batch_size, **loader_options(cfg))


def checkpoint_id(path: Optional[str]) -> Optional[str]:
    """sha256 of a local checkpoint file (first 16 hex digits), or None."""
    if not path:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def dry_run(cfg: Config) -> str:
    """Validate config, data, checkpoint and method; return the task split summary. Trains nothing.

    Data is checked first with the architecture only (no weights), so a missing
    data folder is reported without downloading anything; then a local
    checkpoint is loaded strictly. Hub weights (``pretrained: true``) are not
    downloaded by a dry run. The method config's report (e.g. which of the
    authors' behaviours it selects) is printed first, so it shows even when the
    data or the weights are missing.
    """
    report = cfg.method.report(cfg)
    if report:
        print(report, flush=True)
    cfg = resolve_config(cfg)
    m = cfg.model
    arch_only = copy.deepcopy(cfg)
    arch_only.model.pretrained, arch_only.model.checkpoint = False, None
    vit = build_vit(arch_only)
    bench = build_data(cfg, vit)
    method = build_method(arch_only, vit, bench.task_classes, torch.device("cpu"))  # checks the method's options
    if m.checkpoint:
        build_vit(cfg)  # raises a CheckpointError naming missing/unexpected keys
        weights = f"local file {m.checkpoint} (loaded strictly: OK)"
    else:
        # offline-safe: WeightsUnavailable unless the hub weights are cached; then they are loaded strictly
        weights = hub_weights_status(m.name or BACKBONE_PRESETS[m.preset].model_name) if m.pretrained else "random init"
        if m.pretrained:
            build_vit(cfg)
            weights += " (loaded strictly: OK)"
    params = sum(p.numel() for p in vit.parameters()) / 1e6
    head = (f"backbone: {m.name or m.preset} ({params:.1f} M params), weights: {weights}\n"
            f"{method.summary()}")
    return head + "\n" + bench.summary()


def _check_run_config(cfg: Config, run: RunDir, done: int, force: bool) -> None:
    """Refuse to continue completed tasks with another config (unless ``force``); writes nothing."""
    resolved = config_to_dict(cfg)
    previous = run.read_config()
    if previous is None and done > 0:  # config.yaml lost: each checkpoint carries the config that made it
        previous = run.load_checkpoint(0).get("config")
    old_layout = sorted(k for k in previous or {} if k in MOVED_KEYS)
    if old_layout and done > 0:
        raise RunError(f"{run.root} holds a run of norga 0.1 (old config layout: {old_layout} at the top level); "
                       "this version cannot continue it: finish it with norga 0.1, or use a new --output-dir")
    if previous is not None and done > 0:
        previous = _with_new_defaults(previous)
    if previous is not None and previous != resolved and done > 0 and not force:
        changed = sorted(_diff_keys(previous, resolved))
        raise RunConfigMismatch(
            f"{run.root} holds a run with a different config (changed: {changed}); "
            "use another --output-dir, or --force to continue with the new config"
        )


def _with_new_defaults(previous: dict) -> dict:
    """``previous`` with keys added to norga since that run was written filled with their defaults.

    A new config key's default keeps the behaviour of the versions without it, so a run
    written before the key existed continues without ``--force``. A stored config this
    version cannot read (a removed key, an invalid value) is returned unchanged and so
    reported as a change.
    """
    try:
        return config_to_dict(from_dict(Config, previous, ""))
    except (ConfigError, TypeError):
        return previous


def _diff_keys(a: dict, b: dict, prefix: str = "") -> list:
    keys = []
    for k in set(a) | set(b):
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            keys += _diff_keys(a[k], b[k], path)
        elif a.get(k) != b.get(k):
            keys.append(path)
    return keys


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
                for i in tqdm(range(task + 1), desc="evaluation", leave=False)]


def run_training(cfg: Config, output_dir: Path, force: bool = False) -> dict:
    """Train (or resume) a full run into ``output_dir``; returns metrics.json content.

    Holds the folder's lock throughout; resumes after the last task whose checkpoint is
    intact; a finished run returns its metrics at once. Model and data are built (and
    so checked) before anything is written into the folder.
    """
    cfg = resolve_config(cfg)
    run = RunDir(output_dir)
    with open_run(run, cfg.data.num_tasks) as state:
        _check_run_config(cfg, run, state.done, force)
        finished = finished_metrics(run, state, cfg.data.num_tasks)
        if finished is not None:
            if run.read_config() is None:  # restore a lost config.yaml (checked against the checkpoints above)
                run.write_config(config_to_dict(cfg))
            return finished
        device = resolve_device(cfg.device)
        vit = build_vit(cfg)
        bench = build_data(cfg, vit)
        method = build_method(cfg, vit, bench.task_classes, device)
        run.write_config(config_to_dict(cfg))
        log = run.logger()
        for note in state.notes:
            log.warning(f"warning: {note}")
        tracker = MetricsTracker(cfg, bench, method, None)
        done = _resume(run, method, tracker, state.done, log)
        if not done:
            log.info(f"new run in {run.root}\n{method.summary()}\n{bench.summary()}")
        evaluator = Evaluator(cfg, bench, method)
        with epoch_log(run.root, tensorboard=cfg.logging.tensorboard, completed_tasks=done), amp_mode(cfg.amp):
            for t in range(done, bench.num_tasks):
                _train_task(t, cfg, bench, method, tracker, run, evaluator, log)
                log.info(progress_line(tracker.times, bench.num_tasks))
                write_run_plots(run.root, tracker.metrics(), log)  # never raises: a failed plot is a warning
        return tracker.metrics()


def _resume(run: RunDir, method: Method, tracker: "MetricsTracker", done: int, log) -> int:
    """Load the intact checkpoints 0..done-1 and rebuild metrics.json / acc_matrix.csv from their evaluation rows."""
    for t in range(done):
        saved = run.load_checkpoint(t)
        method.load_state_dict(method_state(saved, method, run))
        tracker.record(t, *saved_evaluation(saved))
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


def _train_task(t: int, cfg: Config, bench, method: Method, tracker: "MetricsTracker", run: RunDir,
                evaluator: Evaluator, log) -> None:
    """Learn and evaluate task t; checkpoint (with its evaluation row), then metrics, then the log line."""
    start = time.time()
    with task_context(t):
        method.learn_task(t, task_loaders(cfg, bench, t, method.train_batch_size, evaluator.loader(t)))
    evaluation = evaluator.seen_tasks(t)
    seconds = time.time() - start
    state = {"task": t, "method_name": cfg.method.name, "method": method.state_dict(t)}
    check_finite(state, t)
    tracker.record(t, evaluation, seconds)
    run.save_checkpoint(t, attach_evaluation(state, evaluation, seconds, config_to_dict(cfg)))
    write_results(run, tracker)
    log.info(tracker.summary_line(t))
    warning = chance_warning(t, evaluation[t], len(bench.task_classes[t]))
    if warning:
        log.warning(warning)


class MetricsTracker:
    """Accuracy matrices (CIL, TIL, TII) and per-task times -> metrics.json content."""

    def __init__(self, cfg: Config, bench, method: Method, previous: Optional[dict]):
        T = bench.num_tasks
        self.cfg, self.bench, self.method = cfg, bench, method
        prev = previous or {}
        self.cil = prev.get("acc_matrix", empty_matrix(T))
        self.til = prev.get("til_acc_matrix", empty_matrix(T))
        self.cil_unmasked = prev.get("official", {}).get("acc_matrix", empty_matrix(T))
        self.tii = prev.get("tii_acc_matrix") or empty_matrix(T)
        self.tii_confusion = prev.get("tii_confusion")  # after the last task: [true task][predicted task] counts
        self.times = prev.get("task_seconds", [])
        self.done = prev.get("completed_tasks", 0)

    def record(self, task: int, evaluation, seconds: float) -> None:
        for i, e in enumerate(evaluation):
            self.cil[i][task], self.til[i][task], self.tii[i][task] = e.cil_accuracy, e.til_accuracy, e.tii_accuracy
            self.cil_unmasked[i][task] = e.cil_unmasked_accuracy
        inferred = all(e.tii_accuracy is not None for e in evaluation)  # methods without task inference: None
        self.tii_confusion = [list(e.tii_predicted) for e in evaluation] if inferred else None
        self.times = self.times[:task] + [seconds]
        self.done = task + 1

    def _block(self, rows):
        return [row[: self.done] for row in rows[: self.done]]

    def _official(self) -> dict:
        """FA, CA, FM as the authors' code reports them: every class competes at evaluation, FM_official."""
        if not self.done:
            return {"acc_matrix": self.cil_unmasked}
        s = summarize(self._block(self.cil_unmasked))
        return {"FA": s["FA"], "CA": s["CA"], "FM": s["FM_official"], "acc_matrix": self.cil_unmasked}

    def metrics(self) -> dict:
        scores = summarize(self._block(self.cil)) if self.done else {}
        til = summarize(self._block(self.til)) if self.done else {}
        m = self.cfg.model
        return {
            **scores,
            "acc_matrix": self.cil,
            "til_FA": til.get("FA"),
            "official": self._official(),
            "til_acc_matrix": self.til,
            **self._task_identity(),
            "tii_confusion": self.tii_confusion,
            "completed_tasks": self.done,
            "num_tasks": self.bench.num_tasks,
            "task_seconds": self.times,
            "seed": self.cfg.seed,
            "class_order": list(self.bench.class_order),
            "task_classes": self.bench.task_classes,
            "data": self.bench.info(),
            "backbone": {"preset": m.preset, "name": m.name, "checkpoint": m.checkpoint,
                         "checkpoint_sha256_16": checkpoint_id(m.checkpoint), "pretrained": m.pretrained},
            "method": self.method.describe(),
            "norga": code_version(),  # version and git commit of the code that produced the run
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "timm": timm.__version__, "torchvision": torchvision.__version__,
                         "numpy": numpy.__version__},
        }

    def _task_identity(self) -> dict:
        """TII accuracies (after the last task, and the matrix); None for a method that infers no task id."""
        final = [self.tii[i][self.done - 1] for i in range(self.done)]
        if None in final:
            return {"tii_accuracy": None, "tii_acc_matrix": None}
        return {"tii_accuracy": final, "tii_acc_matrix": self.tii}

    def summary_line(self, t: int) -> str:
        s = summarize(self._block(self.cil))
        tii = [self.tii[i][t] for i in range(t + 1)]
        tii_text = f", TII acc {sum(tii) / len(tii):.4f}" if None not in tii else ""
        note = self.method.task_summary(t)
        return (f"task {t} done ({t + 1} of {self.bench.num_tasks}): acc on this task {self.cil[t][t]:.4f}, "
                f"running FA {s['FA']:.4f}{tii_text}, time {self.times[t]:.1f}s" + (f"; {note}" if note else ""))


def load_run_config(run_dir: Path) -> Config:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"run folder not found: {run_dir}")
    run = RunDir(run_dir)
    raw = run.read_config()
    if raw is None and run.scan().done:  # config.yaml lost: the checkpoints carry it
        raw = run.load_checkpoint(0).get("config")
    if raw is None:
        raise RunError(f"{run_dir} has no config.yaml: is it a norga run directory?")
    try:
        return from_dict(Config, raw, "")
    except ConfigError as err:
        raise ConfigError(f"{run_dir / 'config.yaml'}: {err}") from err


def evaluate_run(run_dir: Path) -> dict:
    """Recompute the accuracy matrix of a (partial) run from its verified per-task checkpoints.

    A corrupt checkpoint is an error naming it (training would redo that task); ``eval_seconds``
    holds the evaluation time after each task (no training times: nothing is trained here).
    """
    run = RunDir(run_dir)
    cfg = load_run_config(run_dir)
    state = run.scan(cfg.data.num_tasks)
    if state.corrupt:
        raise RunError(f"{run.root}: {state.corrupt}; 'norga train' on this folder trains that task again")
    if state.done == 0:
        raise RunError(f"{run_dir} has no completed task checkpoint yet")
    device = resolve_device(cfg.device)
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, device)
    tracker = MetricsTracker(cfg, bench, method, None)
    evaluator = Evaluator(cfg, bench, method)
    for t in range(state.done):
        start = time.time()
        method.load_state_dict(method_state(run.load_checkpoint(t), method, run), with_training_state=False)
        with amp_mode(cfg.amp):
            evaluation = evaluator.seen_tasks(t)
        tracker.record(t, evaluation, time.time() - start)
    metrics = tracker.metrics()
    metrics["eval_seconds"] = metrics.pop("task_seconds")
    return metrics
