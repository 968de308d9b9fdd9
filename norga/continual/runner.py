"""The task loop: build data and model from a Config, train task by task, evaluate, resume.

``run_training(cfg, output_dir)`` is what ``train.py`` calls; ``evaluate_run``
is what ``eval.py`` calls. A run resumes after its last completed task.
"""
from __future__ import annotations

import copy
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

from ..config import Config, ConfigError, config_to_dict, from_dict
from ..data import build_benchmark
from ..errors import RunError
from ..fidelity import fidelity_report
from ..metrics import empty_matrix, summarize
from ..models import PromptedViT
from ..models.backbone import BACKBONE_PRESETS, backbone_data_config, build_backbone, hub_weights_status
from ..plots import write_run_plots
from .epochlog import epoch_log, progress_line
from .evaluate import FeatureCache, evaluate_task
from .learner import HiDeNoRGaLearner, TaskLoaders, seed_everything, task_generator
from .rundir import RunDir, code_version
from .runstate import (attach_evaluation, chance_warning, check_finite, finished_metrics, open_run,
                       saved_evaluation, task_context, write_results)


class RunConfigMismatch(RunError):
    """The output folder holds a run with another config (use --force to continue anyway)."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' requested but CUDA is not available; use device=cpu or auto")
    return torch.device(name)


def build_model(cfg: Config) -> PromptedViT:
    """Backbone + prefix attention; seeded, so random-init backbones are identical across resumes."""
    seed_everything(cfg.seed)
    m = cfg.model
    kwargs = dict(m.timm_kwargs)
    if cfg.data.image_size is not None:
        kwargs["img_size"] = cfg.data.image_size
    vit = build_backbone(preset=m.preset, model_name=m.name, checkpoint=m.checkpoint, pretrained=m.pretrained,
                         **kwargs)
    options = {"activation": m.activation} if m.gate == "norga" else {}
    return PromptedViT(vit, prompt_layers=m.prompt_layers, gate=m.gate, **options)


def build_data(cfg: Config, model: PromptedViT):
    d = cfg.data
    data_cfg = backbone_data_config(model.vit)
    image_size = d.image_size or int(data_cfg["input_size"][-1])
    return build_benchmark(
        d.name, d.root, d.num_tasks, classes_per_task=d.classes_per_task, first_task_classes=d.first_task_classes,
        class_order=d.class_order, seed=cfg.seed, image_size=image_size, mean=tuple(data_cfg["mean"]),
        std=tuple(data_cfg["std"]), download=d.download, train_per_class=d.train_per_class,
        test_per_class=d.test_per_class, options=d.options, class_order_rng=d.class_order_rng,
        transforms=d.transforms,
    )


def task_loaders(cfg: Config, bench, task: int) -> TaskLoaders:
    workers = cfg.data.num_workers
    common = dict(num_workers=workers, pin_memory=torch.cuda.is_available(), persistent_workers=False)
    train = DataLoader(bench.train_set(task), batch_size=cfg.wtp.batch_size, shuffle=True, drop_last=False,
                       generator=task_generator(cfg.seed, task, 0), **common)
    plain = DataLoader(bench.train_set(task, train_transform=False), batch_size=cfg.eval_batch_size, **common)
    test = DataLoader(bench.test_set(task), batch_size=cfg.eval_batch_size, **common)
    return TaskLoaders(train, plain, test)


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
    """Validate config, data and checkpoint; return the task split summary. Trains nothing.

    Data is checked first with the architecture only (no weights), so a missing
    data folder is reported without downloading anything; then a local
    checkpoint is loaded strictly. Hub weights (``pretrained: true``) are not
    downloaded by a dry run. The fidelity report (which of the authors'
    behaviours the config selects) is printed first, so it shows even when the
    data or the weights are missing.
    """
    print(fidelity_report(cfg), flush=True)
    m = cfg.model
    arch_only = copy.deepcopy(cfg)
    arch_only.model.pretrained, arch_only.model.checkpoint = False, None
    model = build_model(arch_only)
    bench = build_data(cfg, model)
    if m.checkpoint:
        build_model(cfg)  # raises a CheckpointError naming missing/unexpected keys
        weights = f"local file {m.checkpoint} (loaded strictly: OK)"
    else:
        # offline-safe: WeightsUnavailable unless the hub weights are cached; then they are loaded strictly
        weights = hub_weights_status(m.name or BACKBONE_PRESETS[m.preset].model_name) if m.pretrained else "random init"
        if m.pretrained:
            build_model(cfg)
            weights += " (loaded strictly: OK)"
    params = sum(p.numel() for p in model.vit.parameters()) / 1e6
    gate = m.gate + (f"/{m.activation}" if m.gate == "norga" else "")
    head = (f"backbone: {m.name or m.preset} ({params:.1f} M params), weights: {weights}\n"
            f"gate: {gate}, prompt length {m.prompt_length} on blocks {list(m.prompt_layers)}")
    return head + "\n" + bench.summary()


def _check_run_config(cfg: Config, run: RunDir, done: int, force: bool) -> None:
    """Refuse to continue completed tasks with another config (unless ``force``); writes nothing."""
    resolved = config_to_dict(cfg)
    previous = run.read_config()
    if previous is None and done > 0:  # config.yaml lost: each checkpoint carries the config that made it
        previous = run.load_checkpoint(0).get("config")
    if previous is not None and previous != resolved and done > 0 and not force:
        changed = sorted(_diff_keys(previous, resolved))
        raise RunConfigMismatch(
            f"{run.root} holds a run with a different config (changed: {changed}); "
            "use another --output-dir, or --force to continue with the new config"
        )


def _diff_keys(a: dict, b: dict, prefix: str = "") -> list:
    keys = []
    for k in set(a) | set(b):
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            keys += _diff_keys(a[k], b[k], path)
        elif a.get(k) != b.get(k):
            keys.append(path)
    return keys


def evaluate_seen_tasks(learner: HiDeNoRGaLearner, cfg: Config, bench, task: int, cache: FeatureCache) -> list:
    """Evaluate every task <= ``task``; ``cache`` reuses test features across calls (see evaluate.py)."""
    return [evaluate_task(learner.model, learner.tii_head, learner.head, learner.task_prompts,
                          learner.class_to_task, i, learner.seen_mask(task), task_loaders(cfg, bench, i).test,
                          learner.device, cache, cfg.eval_mask_unseen)
            for i in tqdm(range(task + 1), desc="evaluation", leave=False)]


def run_training(cfg: Config, output_dir: Path, force: bool = False) -> dict:
    """Train (or resume) a full run into ``output_dir``; returns metrics.json content.

    Holds the folder's lock throughout; resumes after the last task whose checkpoint is
    intact; a finished run returns its metrics at once. Model and data are built (and
    so checked) before anything is written into the folder.
    """
    run = RunDir(output_dir)
    with open_run(run, cfg.data.num_tasks) as state:
        _check_run_config(cfg, run, state.done, force)
        finished = finished_metrics(run, state, cfg.data.num_tasks)
        if finished is not None:
            if run.read_config() is None:  # restore a lost config.yaml (checked against the checkpoints above)
                run.write_config(config_to_dict(cfg))
            return finished
        device = resolve_device(cfg.device)
        model = build_model(cfg)
        bench = build_data(cfg, model)
        run.write_config(config_to_dict(cfg))
        log = run.logger()
        for note in state.notes:
            log.warning(f"warning: {note}")
        learner = HiDeNoRGaLearner(model, bench.task_classes, cfg, device)
        tracker = MetricsTracker(cfg, bench, learner, None)
        done = _resume(run, learner, tracker, state.done, log)
        if not done:
            log.info(f"new run in {run.root}\n{bench.summary()}")
        cache = FeatureCache()
        with epoch_log(run.root, tensorboard=cfg.logging.tensorboard, completed_tasks=done):
            for t in range(done, bench.num_tasks):
                _train_task(t, cfg, bench, learner, tracker, run, cache, log)
                log.info(progress_line(tracker.times, bench.num_tasks))
                write_run_plots(run.root, tracker.metrics(), log)  # never raises: a failed plot is a warning
        return tracker.metrics()


def _resume(run: RunDir, learner: HiDeNoRGaLearner, tracker: "MetricsTracker", done: int, log) -> int:
    """Load the intact checkpoints 0..done-1 and rebuild metrics.json / acc_matrix.csv from their evaluation rows."""
    for t in range(done):
        saved = run.load_checkpoint(t)
        learner.load_state_dict(saved)
        tracker.record(t, *saved_evaluation(saved))
    if done:
        write_results(run, tracker)  # restores them if lost, e.g. killed between checkpoint and metrics
        last, total = ("task 0" if done == 1 else f"tasks 0-{done - 1}"), tracker.bench.num_tasks
        log.info(f"resuming after task {done - 1}: {last} done ({done} of {total}), next task {done}"
                 if done < total else f"all {total} tasks done; metrics.json and acc_matrix.csv rebuilt from the "
                 "checkpoints")
    return done


def _train_task(t: int, cfg: Config, bench, learner: HiDeNoRGaLearner, tracker: "MetricsTracker", run: RunDir,
                cache: FeatureCache, log) -> None:
    """Learn and evaluate task t; checkpoint (with its evaluation row), then metrics, then the log line."""
    start = time.time()
    with task_context(t):
        learner.learn_task(t, task_loaders(cfg, bench, t))
    evaluation = evaluate_seen_tasks(learner, cfg, bench, t, cache)
    seconds = time.time() - start
    state = learner.state_dict(t)
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

    def __init__(self, cfg: Config, bench, learner: HiDeNoRGaLearner, previous: Optional[dict]):
        T = bench.num_tasks
        self.cfg, self.bench, self.learner = cfg, bench, learner
        prev = previous or {}
        self.cil = prev.get("acc_matrix", empty_matrix(T))
        self.til = prev.get("til_acc_matrix", empty_matrix(T))
        self.cil_unmasked = prev.get("official", {}).get("acc_matrix", empty_matrix(T))
        self.tii = prev.get("tii_acc_matrix", empty_matrix(T))
        self.tii_confusion = prev.get("tii_confusion")  # after the last task: [true task][predicted task] counts
        self.times = prev.get("task_seconds", [])
        self.done = prev.get("completed_tasks", 0)

    def record(self, task: int, evaluation, seconds: float) -> None:
        for i, e in enumerate(evaluation):
            self.cil[i][task], self.til[i][task], self.tii[i][task] = e.cil_accuracy, e.til_accuracy, e.tii_accuracy
            self.cil_unmasked[i][task] = e.cil_unmasked_accuracy
        self.tii_confusion = [list(e.tii_predicted) for e in evaluation]
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
            "tii_accuracy": [self.tii[i][self.done - 1] for i in range(self.done)],
            "tii_acc_matrix": self.tii,
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
            "gate": {"name": m.gate, "activation": m.activation if m.gate == "norga" else None,
                     **self.learner.gate_values()},
            "norga": code_version(),  # version and git commit of the code that produced the run
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "timm": timm.__version__, "torchvision": torchvision.__version__,
                         "numpy": numpy.__version__},
        }

    def summary_line(self, t: int) -> str:
        s = summarize(self._block(self.cil))
        tii = sum(self.tii[i][t] for i in range(t + 1)) / (t + 1)
        return (f"task {t} done ({t + 1} of {self.bench.num_tasks}): acc on this task {self.cil[t][t]:.4f}, "
                f"running FA {s['FA']:.4f}, TII acc {tii:.4f}, time {self.times[t]:.1f}s")


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
    model = build_model(cfg)
    bench = build_data(cfg, model)
    learner = HiDeNoRGaLearner(model, bench.task_classes, cfg, device)
    tracker = MetricsTracker(cfg, bench, learner, None)
    cache = FeatureCache()
    for t in range(state.done):
        start = time.time()
        learner.load_state_dict(run.load_checkpoint(t), with_stats=False)
        evaluation = evaluate_seen_tasks(learner, cfg, bench, t, cache)
        tracker.record(t, evaluation, time.time() - start)
    metrics = tracker.metrics()
    metrics["eval_seconds"] = metrics.pop("task_seconds")
    return metrics
