"""HiDe-Prompt with NoRGa gates as one learner object with per-task hooks.

``learner.learn_task(t, data)`` runs, for task t (paper Algorithm 1):

1. uninstructed statistics: Gaussians of frozen features of the task's classes;
2. TII: head omega trained on the task, then (t > 0) aligned on pseudo-features
   of all seen classes (eq. 59);
3. WTP: prompt e_t (initialised from e_{t-1}) through the ensemble
   p_t = (1-m) e_t + m mean(e_<t) and the classifier head psi (eq. 57);
   NoRGa's alpha, tau train on task 0 only and are frozen afterwards; with
   ``wtp.prompt_writeback`` (the authors' code) e_t is then overwritten by p_t;
4. instructed statistics: Gaussians of features prompted with p_t;
5. TAP: psi aligned on pseudo-features of all seen classes (eq. 58); the
   authors' code skips it after task 0 (``tap.after_first_task: false``).

Where the authors' code and the paper differ, the config chooses; see
docs/fidelity.md for every such option.

``learner.state_dict(t)`` holds everything needed to continue after task t;
statistics are stored per task (only that task's classes) to keep each
checkpoint small.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from ..models import PromptedViT, PromptPool
from .gaussian import GaussianStore
from .heads import TaskIdentityHead, class_mask, init_linear_layers
from .stages import align_head, extract_features, train_tii_on_features, train_tii_on_images, train_wtp


@dataclass
class TaskLoaders:
    """Loaders of one task: augmented train, un-augmented train (statistics), test."""

    train: object
    train_plain: object
    test: object


def task_generator(seed: int, task: int, stage: int) -> torch.Generator:
    """A generator that depends only on (seed, task, stage): resumable runs stay identical."""
    return torch.Generator().manual_seed(seed * 1_000_003 + task * 101 + stage)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Global RNG states as tensors and plain values, so checkpoints load with ``weights_only=True``.

    (Informational: every task reseeds from (seed, task), so resuming never needs them.)
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)}}


class HiDeNoRGaLearner:
    """Prompts, gates, heads and statistics of one class-incremental run."""

    def __init__(self, model: PromptedViT, task_classes: Sequence[Sequence[int]], cfg, device):
        self.model, self.cfg, self.device = model, cfg, device
        self.task_classes = [list(c) for c in task_classes]
        self.num_tasks = len(self.task_classes)
        self.num_classes = sum(len(c) for c in self.task_classes)
        self.class_to_task = torch.empty(self.num_classes, dtype=torch.long)
        for t, classes in enumerate(self.task_classes):
            self.class_to_task[classes] = t
        dim = model.embed_dim
        self.prompted = cfg.model.prompt_length > 0 and len(model.prompt_layers) > 0
        shape = model.prompt_shape(max(cfg.model.prompt_length, 1))
        self.pool = PromptPool(self.num_tasks, *shape[:1], *shape[2:]).to(device) if self.prompted else None
        self.task_prompts = torch.zeros(self.num_tasks, *shape, device=device) if self.prompted else None
        self.head = init_linear_layers(torch.nn.Linear(dim, self.num_classes), cfg.head_init).to(device)
        tii_head = TaskIdentityHead(dim, self.num_classes, cfg.tii.mlp_ratios, cfg.tii.mlp_style)
        self.tii_head = init_linear_layers(tii_head, cfg.head_init).to(device)
        s = cfg.stats
        self.uninstructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed)
        self.instructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed)
        model.freeze_backbone()
        model.to(device)

    # ---- helpers ------------------------------------------------------
    def seen_classes(self, task: int) -> List[int]:
        return [c for t in range(task + 1) for c in self.task_classes[t]]

    def seen_mask(self, task: int) -> Tensor:
        return class_mask(self.num_classes, self.seen_classes(task), self.device)

    def old_classes(self, task: int) -> List[int]:
        """Classes of the tasks before ``task`` (C_old of the authors' alignment budget)."""
        return self.seen_classes(task - 1) if task > 0 else []

    def _lr(self, lr: float, batch_size: int) -> float:
        return lr * batch_size / 256 if self.cfg.scale_lr_by_batch else lr

    def _align_batches(self, rule: str, task: int) -> Optional[int]:
        """Batches per alignment epoch: C_old (``old_classes``, authors' code) or all (None)."""
        return len(self.old_classes(task)) if rule == "old_classes" else None

    def _add_statistics(self, store: GaussianStore, feats: Tensor, labels: Tensor, task: int) -> None:
        for c in self.task_classes[task]:
            members = feats[labels == c]
            if len(members) < 2:
                raise ValueError(f"class {c} of task {task} has {len(members)} training samples; need >= 2")
            store.add(c, members)

    # ---- the task -----------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        cfg, classes = self.cfg, self.task_classes[task]
        seed_everything(cfg.seed * 1_000_003 + task)
        frozen, labels = extract_features(self.model, loaders.train_plain, self.device, desc="frozen feats")
        self._add_statistics(self.uninstructed, frozen, labels, task)
        self._train_tii(task, loaders, frozen, labels)
        if self.prompted:
            self._train_wtp(task, loaders, classes)
            prompt = self.task_prompts[task]
            frozen, labels = extract_features(self.model, loaders.train_plain, self.device, prompt, "prompted feats")
        else:  # reference without prompts: the head learns on frozen features
            train_tii_on_features(self.head, frozen, labels, classes, self.num_classes, cfg.wtp.epochs,
                                  self._lr(cfg.wtp.lr, cfg.wtp.batch_size) * cfg.wtp.head_lr_scale,
                                  cfg.wtp.batch_size, task_generator(cfg.seed, task, 4), self.device,
                                  stage="head", task=task)
        self._add_statistics(self.instructed, frozen, labels, task)
        if task > 0 or cfg.tap.after_first_task:
            align_head(self.head, self.instructed, self.seen_classes(task), self.num_classes, cfg.tap.epochs,
                       cfg.tap.lr, cfg.tap.samples_per_class, cfg.tap.batch_size,
                       task_generator(cfg.seed, task, 3), self.device, "tap",
                       self._align_batches(cfg.tap.batches, task), task)

    def _train_tii(self, task: int, loaders: TaskLoaders, frozen: Tensor, labels: Tensor) -> None:
        c, classes = self.cfg.tii, self.task_classes[task]
        lr = self._lr(c.lr, c.batch_size)
        if c.cache_features:
            train_tii_on_features(self.tii_head, frozen, labels, classes, self.num_classes, c.epochs, lr,
                                  c.batch_size, task_generator(self.cfg.seed, task, 1), self.device, c.grad_clip,
                                  task=task)
        else:
            train_tii_on_images(self.model, self.tii_head, loaders.train, classes, self.num_classes,
                                c.epochs, lr, self.device, c.grad_clip, task=task)
        if task > 0:
            align_lr = self._lr(c.align_lr, c.batch_size) if c.scale_align_lr else c.align_lr
            align_head(self.tii_head, self.uninstructed, self.seen_classes(task), self.num_classes,
                       c.align_epochs, align_lr, c.samples_per_class, c.batch_size,
                       task_generator(self.cfg.seed, task, 2), self.device, "tii_align",
                       self._align_batches(c.align_batches, task), task)

    def _train_wtp(self, task: int, loaders: TaskLoaders, classes: Sequence[int]) -> None:
        c = self.cfg.wtp
        if task > 0:
            self.pool.init_from(task, task - 1)
            self.model.freeze_gates()  # alpha, tau are trained on the first task only
        self.pool.train_only(task)
        gates = list(self.model.gate_parameters()) if task == 0 else []
        old = [k for t in range(task) for k in self.task_classes[t]]
        prototypes = self.instructed.means(old).to(self.device) if old else None
        train_wtp(self.model, self.head, lambda: self.pool.ensembled(task, c.momentum),
                  [self.pool.prompts[task]], gates, loaders.train, classes, self.num_classes, prototypes, c,
                  self._lr(c.lr, c.batch_size), self.device, task, self.gate_values)
        self.pool.prompts[task].requires_grad_(False)
        if task == 0:
            self.model.freeze_gates()
        with torch.no_grad():
            self.task_prompts[task] = self.pool.ensembled(task, c.momentum).detach()
            if c.prompt_writeback:  # authors' code: the stored e_t becomes p_t (next init and later means use it)
                self.pool.prompts[task].copy_(self.task_prompts[task])

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> dict:
        """State after ``task``: small modules in full, statistics of this task's classes only."""
        classes = set(self.task_classes[task])
        pick = lambda store: {k: v for k, v in store.state_dict()["stats"].items() if k in classes}
        return {
            "task": task,
            "prompts": self.pool.state_dict() if self.prompted else None,
            "task_prompts": self.task_prompts.cpu() if self.prompted else None,
            "gates": {f"{i}": a.prefix_gate.state_dict() for i, a in enumerate(self.model.prefix_attentions)},
            "head": self.head.state_dict(),
            "tii_head": self.tii_head.state_dict(),
            "uninstructed_stats": pick(self.uninstructed),
            "instructed_stats": pick(self.instructed),
            "rng": rng_state(),
        }

    def load_state_dict(self, state: dict, with_stats: bool = True) -> None:
        if self.prompted:
            self.pool.load_state_dict(state["prompts"])
            self.task_prompts.copy_(state["task_prompts"].to(self.device))
            for p in self.pool.prompts:
                p.requires_grad_(False)
        for i, attn in enumerate(self.model.prefix_attentions):
            attn.prefix_gate.load_state_dict(state["gates"][f"{i}"])
        self.head.load_state_dict(state["head"])
        self.tii_head.load_state_dict(state["tii_head"])
        if with_stats:
            self.uninstructed.stats.update({int(k): v for k, v in state["uninstructed_stats"].items()})
            self.instructed.stats.update({int(k): v for k, v in state["instructed_stats"].items()})
        self.model.freeze_gates()

    def gate_values(self) -> Dict[str, List[float]]:
        """alpha / tau per prompted layer (empty lists for the linear gate)."""
        attns = self.model.prefix_attentions
        return {name: [float(torch.as_tensor(getattr(a.prefix_gate, name)).detach()) for a in attns
                       if hasattr(a.prefix_gate, name)]
                for name in ("alpha", "tau")}
