"""The stages the HiDe family shares (HiDe-Prompt / NoRGa in :mod:`.hideprompt`, HiDe-LoRA in :mod:`.hidelora`).

:class:`HiDeStages` is a mixin for a :class:`~norga.methods.base.Method` that sets ``self.c`` (a config section with
``scale_lr_by_batch``, ``tii`` and ``tap`` as in :mod:`.hideprompt_config`), ``self.model`` (the frozen token
model; its plain forward gives the frozen features (B, D)), ``self.tii_head`` (frozen features (B, D) -> class logits
(B, C)), ``self.head`` (the classifier psi, (B, D) -> (B, C)), ``self.uninstructed`` and ``self.instructed``
(:class:`~norga.toolkit.gaussian.GaussianStore` of frozen and of task-tuned features). It provides

* task-identity inference (TII): the TII head trained on the task's frozen features, then (t > 0) aligned on
  pseudo-features of every seen class drawn from ``uninstructed`` (paper eq. 59);
* task-adaptive prediction (TAP): psi aligned on pseudo-features of every seen class drawn from ``instructed``
  (eq. 58), skipped on the first task unless ``tap.after_first_task``;
* the statistics bookkeeping and the learning-rate and batch-count rules of the authors' code.
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from ..toolkit.gaussian import GaussianStore
from ..toolkit.heads import masked_logits
from ..toolkit.seeding import task_generator
from ..toolkit.stages import align_head, fit_on_features
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from .base import TaskLoaders, scaled_lr
from .hooks import hooked_stage


class HiDeStages:
    """TII, TAP and class statistics of the HiDe pipeline (see the module docstring for what the host sets)."""

    def old_classes(self, task: int) -> List[int]:
        """Classes of the tasks before ``task`` (C_old of the authors' alignment budget)."""
        return self.seen_classes(task - 1) if task > 0 else []

    def lr_scaled(self, lr: float, batch_size: int) -> float:
        """``lr`` x batch / 256 under ``scale_lr_by_batch`` (the authors' scripts), else ``lr``."""
        return scaled_lr(lr, batch_size, self.c.scale_lr_by_batch)

    def _align_batches(self, rule: str, task: int) -> Optional[int]:
        """Batches per alignment epoch: C_old (``old_classes``, authors' code) or all (None)."""
        return len(self.old_classes(task)) if rule == "old_classes" else None

    def _add_statistics(self, store: GaussianStore, feats: Tensor, labels: Tensor, task: int) -> None:
        """Statistics of each class of ``task`` from its rows of ``feats`` (N, D) (labels (N,))."""
        for c in self.task_classes[task]:
            members = feats[labels == c]
            if len(members) < 2:
                raise ValueError(f"class {c} of task {task} has {len(members)} training samples; need >= 2")
            store.add(c, members)

    @hooked_stage("tii")
    def train_tii(self, task: int, loaders: TaskLoaders, frozen: Tensor, labels: Tensor) -> None:
        """Stage TII (a public hook point: :mod:`norga.methods.hooks`): the TII head on task ``task`` (frozen
        features (N, D), labels (N,)), then its alignment (t > 0)."""
        t, seed = self.c.tii, self.cfg.seed
        lr = self.lr_scaled(t.lr, t.batch_size)
        if t.cache_features:
            fit_on_features(self.tii_head, frozen, labels, self.task_mask(task), t.epochs, lr, t.batch_size,
                            task_generator(seed, task, 1), self.device, t.grad_clip, task=task,
                            lr_key=self.config_key("tii.lr"))
        else:
            self._train_tii_on_images(task, loaders.train, t.epochs, lr, t.grad_clip)
        if task > 0:
            align_lr = self.lr_scaled(t.align_lr, t.batch_size) if t.scale_align_lr else t.align_lr
            align_head(self.tii_head, self.uninstructed, self.seen_classes(task), self.num_classes,
                       t.align_epochs, align_lr, t.samples_per_class, t.batch_size,
                       task_generator(seed, task, 2), self.device, "tii_align",
                       self._align_batches(t.align_batches, task), task, lr_key=self.config_key("tii.align_lr"))

    def _train_tii_on_images(self, task: int, loader, epochs: int, lr: float, clip: Optional[float]) -> None:
        """TII head on frozen features of augmented images (recomputed every epoch, the authors' code)."""
        head, model, device = self.tii_head, self.model, self.device
        optimizer = torch.optim.Adam(head.parameters(), lr=lr)

        def forward(batch):
            x, y = batch
            with torch.no_grad():
                model.eval()
                feats = model(x.to(device))
            return {"logits": head(feats), "labels": y.to(device)}

        run_stage(Stage("tii", task, epochs, optimizer, clip=clip, clip_params=list(head.parameters()),
                        train_modules=[head], lr_key=self.config_key("tii.lr")),
                  batches=lambda epoch: loader, forward=forward, terms={"ce": cross_entropy_term(self.task_mask(task))})

    @hooked_stage("tap")
    def train_tap(self, task: int) -> None:
        """Stage TAP (eq. 58; a public hook point: :mod:`norga.methods.hooks`): psi aligned on ``instructed``
        pseudo-features of every seen class, when the config runs it
        for ``task`` (the authors' code: tasks t > 0 only)."""
        c = self.c
        if task > 0 or c.tap.after_first_task:
            align_head(self.head, self.instructed, self.seen_classes(task), self.num_classes, c.tap.epochs,
                       c.tap.lr, c.tap.samples_per_class, c.tap.batch_size,
                       task_generator(self.cfg.seed, task, 3), self.device, "tap",
                       self._align_batches(c.tap.batches, task), task, lr_key=self.config_key("tap.lr"))

    def tii_tasks(self, frozen: Tensor, seen: Tensor) -> Tensor:
        """Inferred task (B,) of frozen test features (B, D): the TII head's argmax over the seen classes ``seen``
        (a (C,) mask), mapped to its task."""
        classes = masked_logits(self.tii_head(frozen), seen).argmax(dim=1)
        return self.class_to_task.to(classes.device)[classes]
