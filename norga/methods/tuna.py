"""TUNA as a registered method: task-specific adapters, a universal adapter, entropy-based selection.

Adapters: every adapted block's list ``tuned`` holds the universal slot at index 0 and task t's bottleneck adapter
(:mod:`norga.models.adapters`, width r) at index t + 1; phi_k(x) (D,) is the backbone's feature with adapter k on.
Head: per-task class weights W_t (n_t, D), trunc-normal (std 0.02); cos(x) (B, n_seen) against all seen classes.

Task t: adapter t + 1 (``adapter_init: previous``: a copy of adapter t, as the code trains one adapter throughout;
``fresh``: zero output) and the head's seen rows are trained by SGD (momentum, weight decay, cosine decay per
epoch) on

    L = CosFace(s, m)(cos(phi_{t+1}(x))[:, task t's classes], y)
        + reg e^{-(t+1)} sum_{i<t} mean_l |mean(N(U_l) N(U_{i,l})^T)|      (``orth_weight`` = reg; U: up (D, r))

then frozen (``orth_updates_old``, the code: the penalty's gradient also moves the older adapters' U while task t
trains). The universal slot becomes the elect-merge of adapters 1..t+1 (:func:`~.tuna_parts.merge_state`).
Class statistics (mean, covariance + ridge I) of task t's classes from phi_{t+1} on un-augmented images; after
every task but the first, classifier alignment: ``ca_epochs`` epochs of ``ca_per_class`` samples per seen class
(mean scaled by ``ca_mean_decay``), batches of ``ca_per_class``, CE(s cos, y), SGD with a cosine of period
``ca_cosine_period`` epochs.

Test with T tasks learned: z_k = s cos(phi_{k+1}(x)) (B, C_seen) for k < T; k* = argmin_k entropy(softmax z_k);
scores = softmax(z_{k*}) + softmax(z_u), u the universal branch (``universal: last_task``: adapter T, the code;
``merged``: slot 0, the paper). With one task: z_0 alone (the code's first-task evaluation). Given the true task
(task-incremental), its adapter replaces k*.
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch
from torch import Tensor, nn

from ..models.adapters import add_adapters, tuning
from ..toolkit.gaussian import GaussianStore, draw_generator
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import named_generator
from ..toolkit.stages import extract_features
from ..toolkit.devices import to_device
from ..toolkit.training import Stage, run_stage
from . import register_method
from .adapter_stage import TunedView, cached_features, frozen_adapter_blocks, local_labels
from .base import Method, Prediction, TaskLoaders, TestBatch
from .tuna_parts import (combine, cosface_loss, cosine_logits, mean_factors, merge_state, orthogonality_penalty,
                         orthogonality_weight, select_by_entropy)


@register_method("tuna")
class TUNA(Method):
    """``tuned[b][k]`` (block b; k = 0 universal, k = t + 1 task t), ``heads[t]`` (n_t, D), ``stats`` (class
    Gaussians), ``learned_tasks``."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model, self.layers, self.blocks, self.tuned = frozen_adapter_blocks(self, vit, c.adapter_layers)
        self.heads = nn.ParameterList()
        self.stats = GaussianStore(c.stats, c.stats_ridge, seed=cfg.seed)
        self.learned_tasks = 0
        self.add_adapter()  # the universal slot (index 0)
        self.freeze_adapters()

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def add_adapter(self) -> nn.ModuleList:
        c = self.c
        return add_adapters(self.blocks, self.model.embed_dim, c.bottleneck, c.adapter_scale, c.adapter_dropout)

    def add_head(self, task: int) -> None:
        weight = torch.empty(len(self.task_classes[task]), self.model.embed_dim, device=self.device)
        self.heads.append(nn.Parameter(nn.init.trunc_normal_(weight, std=0.02)))

    def seen_order(self) -> List[int]:
        """The class ids of the heads' rows, task by task."""
        return self.seen_classes(len(self.heads) - 1) if len(self.heads) else []

    def cosines(self, feats: Tensor) -> Tensor:
        """(B, D) -> (B, n_seen) cosines against every head row, in :meth:`seen_order`."""
        return cosine_logits(feats, torch.cat(list(self.heads)))

    # ---- training -----------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        if self.learned_tasks != task:
            raise RuntimeError(f"task {task} needs {task} learned tasks, found {self.learned_tasks}")
        new = self.add_adapter()
        if self.c.adapter_init == "previous" and task > 0:
            for block in self.blocks:
                block.tuned[task + 1].load_state_dict(block.tuned[task].state_dict())
        self.add_head(task)
        self.train_adapter(task, new, loaders.train)
        self.freeze_adapters()
        self.merge_universal(task)
        feats, labels = extract_features(TunedView(self.model, task + 1), loaders.train_plain, self.device,
                                         desc="tuna stats feats")
        for cls in self.task_classes[task]:
            self.stats.add(cls, feats[labels == cls])
        if task > 0 and self.c.ca_epochs > 0:
            self.align_classifier(task)
        self.learned_tasks = task + 1

    def train_adapter(self, task: int, new: nn.ModuleList, loader) -> None:
        """Train task ``task``'s new adapter ``new`` (one module per block) and its head on ``loader``'s augmented
        (x, y) batches; the hook point ``adapter_drawn`` (norga/methods/hooks.py) sees them first."""
        self.hooks.notify("adapter_drawn", self, task, new)
        c, classes = self.c, self.task_classes[task]
        orth = c.orth_weight > 0 and task > 0
        old_ups = [b.tuned[i + 1].up.weight for i in range(task) for b in self.blocks] if orth and c.orth_updates_old \
            else []
        for p in [*new.parameters(), *old_ups]:
            p.requires_grad_(True)
        params = [*new.parameters(), *self.heads.parameters(), *old_ups]
        optimizer = make_optimizer("sgd", params, lr=c.lr, weight_decay=c.weight_decay, momentum=c.momentum)
        scheduler = epoch_scheduler(optimizer, "cosine", c.epochs, min_lr=c.min_lr)
        view, n_task = TunedView(self.model, task + 1), len(classes)

        def forward(batch):
            x, y = batch
            return {"cos": self.cosines(view(to_device(x, self.device)))[:, -n_task:],
                    "labels": to_device(local_labels(y, classes, self.num_classes), self.device)}

        terms = {"cosface": lambda out: cosface_loss(out["cos"], out["labels"], c.scale, c.margin)}
        if orth:
            factor = orthogonality_weight(c.orth_weight, task)
            terms["orth"] = lambda out: factor * orthogonality_penalty(
                [b.tuned[task + 1].up.weight for b in self.blocks],
                [[b.tuned[i + 1].up.weight for b in self.blocks] for i in range(task)])
        self.model.eval()  # the frozen backbone stays in eval mode; the new adapter trains (its dropout on)
        run_stage(Stage("tuna", task, c.epochs, optimizer, scheduler, train_modules=[new],
                        lr_key=self.config_key("lr")),
                  batches=lambda epoch: loader, forward=forward, terms=terms)

    def merge_universal(self, task: int) -> None:
        """Slot 0 of every block := the elect-merge of the task adapters 1..task+1 of that block."""
        with torch.no_grad():
            for block in self.blocks:
                merged = merge_state([block.tuned[k].state_dict() for k in range(1, task + 2)])
                block.tuned[0].load_state_dict(merged)

    def align_classifier(self, task: int) -> None:
        c, order = self.c, self.seen_order()
        sizes = [len(t) for t in self.task_classes]
        factors = torch.tensor(mean_factors([int(self.class_to_task[k]) for k in order], sizes, task,
                                            c.ca_mean_decay), dtype=torch.float32)
        means = self.stats.means(order)
        row = {cls: i for i, cls in enumerate(order)}
        generator = named_generator(self.cfg.seed, task, "tuna.ca")
        draws = draw_generator(generator, self.device)  # the CPU: generator itself; else seeded by one draw of it
        optimizer = make_optimizer("sgd", list(self.heads.parameters()), lr=c.ca_lr, weight_decay=c.weight_decay,
                                   momentum=c.momentum)
        scheduler = epoch_scheduler(optimizer, "cosine", c.ca_cosine_period)

        def batches(epoch: int):
            feats, labels = self.stats.sample(order, c.ca_per_class, draws)
            rows = torch.as_tensor([row[int(y)] for y in labels])
            feats = feats + ((factors[rows] - 1.0)[:, None] * means[rows]).to(feats.device)
            perm = torch.randperm(len(rows), generator=generator)
            for start in range(0, len(perm), c.ca_per_class):
                idx = perm[start:start + c.ca_per_class]
                yield feats[idx].to(self.device), rows[idx].to(self.device)

        run_stage(Stage("tuna_ca", task, c.ca_epochs, optimizer, scheduler, lr_key=self.config_key("ca_lr")),
                  batches=batches, forward=lambda b: {"logits": c.scale * self.cosines(b[0]), "labels": b[1]},
                  terms={"ce": lambda out: nn.functional.cross_entropy(out["logits"], out["labels"])})

    def freeze_adapters(self) -> None:
        for p in self.tuned.parameters():
            p.requires_grad_(False)
        self.tuned.eval()

    # ---- prediction ---------------------------------------------------------
    def scaled_logits(self, feats: Tensor) -> Tensor:
        """(B, D) -> (B, C): s cos over the seen classes, -inf elsewhere."""
        out = feats.new_full((feats.shape[0], self.num_classes), float("-inf"))
        out[:, self.seen_order()] = self.c.scale * self.cosines(feats)
        return out

    def universal_features(self, batch: TestBatch, cache: Any) -> Tensor:
        if self.c.universal == "last_task":
            return cached_features(self.model, batch, cache, self.learned_tasks, self.device)
        with tuning(self.model, 0):  # the merged slot changes with every task: not cached
            return self.model(batch.images).float()

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        n = self.learned_tasks
        task_logits = torch.stack([self.scaled_logits(cached_features(self.model, batch, cache, k + 1, self.device))
                                   for k in range(n)])  # (T, B, C)
        if n == 1:
            return Prediction(task_logits[0], task_logits[0], torch.zeros(len(batch.images), dtype=torch.long))
        chosen = select_by_entropy(task_logits)
        rows = torch.arange(task_logits.shape[1], device=task_logits.device)
        universal = self.scaled_logits(self.universal_features(batch, cache))
        given = task_logits[batch.task]
        return Prediction(combine(task_logits[chosen, rows], universal), combine(given, universal), chosen.cpu())

    # ---- state --------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"tuned": {k: v.cpu() for k, v in self.tuned.state_dict().items()},
                "heads": [h.detach().cpu() for h in self.heads], "stats": self.stats.state_dict(),
                "learned_tasks": self.learned_tasks}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        while len(self.blocks[0].tuned) < int(state["learned_tasks"]) + 1:
            self.add_adapter()
        self.tuned.load_state_dict(state["tuned"])
        self.freeze_adapters()
        self.heads = nn.ParameterList(nn.Parameter(h.to(self.device)) for h in state["heads"])
        self.stats = GaussianStore.from_state_dict(state["stats"])
        self.learned_tasks = int(state["learned_tasks"])

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "learned_tasks": self.learned_tasks, "adapter_layers": self.layers,
                "adapter_parameters": sum(p.numel() for p in self.tuned.parameters()),
                "adapter_init": c.adapter_init, "universal": c.universal, "orth_weight": c.orth_weight,
                "ca_mean_decay": c.ca_mean_decay}

    def summary(self) -> str:
        c = self.c
        return (f"method: tuna (an adapter per task on blocks {self.layers}, r={c.bottleneck}, {c.epochs} epochs, "
                f"init {c.adapter_init}; entropy-selected task adapter + {c.universal} universal adapter; "
                f"classifier alignment {c.ca_epochs} epochs)")
