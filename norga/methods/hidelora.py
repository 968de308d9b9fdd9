"""HiDe-LoRA (``hidelora``): the HiDe pipeline of :mod:`.hideprompt` with one LoRA per task in place of the prefix.

Each block of ``lora_layers`` has its fused qkv wrapped (:class:`~norga.models.lora_qkv.LoRAQKV`, projections
``lora_targets``, reference: k and v); task t owns one branch per block: down A_t[p] (r, D), up B_t[p] (D, r), and
while task t's LoRA is active projection p computes x W_p^T (+ b_p) + (alpha / r) x A_t[p]^T B_t[p]^T for every
token state x (D,). Only one task's LoRA is active in a forward. ``learn_task(t, loaders)`` runs

1.-2. TII, by the learner ``tii_model`` names (:mod:`.hidelora_tii`): ``frozen_head`` (HiDe-Prompt's, shipped):
   uninstructed statistics (Gaussians of the frozen features (N, D) of the task's classes), then the TII head on
   the task, aligned on pseudo-features of all seen classes; ``continual_lora`` (the reference's): a shared LoRA
   and a linear head trained on the task, statistics of its features, the head aligned;
3. WTP: A_t, B_t (task 0: A ~ ``lora_init``, B = 0; later tasks: task t-1's factors) and psi trained on
   CE over the task's classes + reg * the contrastive regulariser against the old classes' prototypes (Adam,
   warm-up + cosine); then, for t > 0, A_t <- (1 - m) A_t + m mean(A_<t) and B_t likewise (``wtp.momentum``);
4. instructed statistics: Gaussians of the features under the (mixed) LoRA_t;
5. TAP: psi aligned on pseudo-features of all seen classes (tasks t > 0 in the reference).

Prediction (per sample): TII -> task k -> features under LoRA_k -> psi (C logits).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import Tensor, nn

from ..models.lora_qkv import attach_lora_qkv, branch_state, load_branches
from ..toolkit.feature_cache import FeatureCache, prompted_features
from ..toolkit.gaussian import GaussianStore
from ..toolkit.heads import init_linear_layers
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.stages import REGULARISERS, extract_features
from ..toolkit.devices import to_device
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch, chosen_blocks
from .hide_stages import HiDeStages
from .hooks import hooked_stage
from .hidelora_parts import TaskLoRAModel, every_branch_scaled, mix_with_previous, reference_down_init
from .hidelora_tii import TII_MODELS, shared_weight_copy


@register_method("hidelora")
class HiDeLoRA(HiDeStages, Method):
    """Task LoRAs (``wrappers``: one branch per task per block), psi (``head``), TII head and both statistics."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model = self.frozen_token_model(vit)
        self.layers = chosen_blocks(vit, c.lora_layers, "method.lora_layers")
        tii_model = TII_MODELS[c.tii_model]
        # a TII model with LoRA of its own gets its own module tree of vit, taken before the task LoRAs wrap vit
        view = shared_weight_copy(vit) if tii_model.own_backbone_view else None
        self.wrappers = attach_lora_qkv(vit, self.layers, c.lora_targets).to(device)
        for wrapper in self.wrappers.values():
            wrapper.coefficients = self.scaling
        self.tuned = TaskLoRAModel(self.model, self.wrappers)
        dim = self.model.embed_dim
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), c.head_init).to(device)
        self.tii = tii_model(self, view)  # sets self.tii_head
        s = c.stats
        self.uninstructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed, s.centroid_sampling)
        self.instructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed, s.centroid_sampling)

    @property
    def train_batch_size(self) -> int:
        return self.c.wtp.batch_size

    def scaling(self, wrapper) -> Tensor:
        """(n_branches, P) coefficients: alpha / r for every branch and projection."""
        return every_branch_scaled(wrapper, self.c.alpha / self.c.rank)

    # ---- the task -----------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        labels = self.tii.learn(task, loaders)
        self.train_wtp(task, loaders)
        tuned, _ = extract_features(self.tuned, loaders.train_plain, self.device, task, "lora feats")
        self._add_statistics(self.instructed, tuned, labels, task)
        self.train_tap(task)

    def start_task(self, task: int) -> List[nn.Parameter]:
        """Add task ``task``'s branch to every block (A by ``lora_init`` or copied from task - 1, B = 0 or copied),
        freeze the older ones; returns the new factors."""
        c, new = self.c, []
        for wrapper in self.wrappers.values():
            for branch in wrapper.branches:
                branch.requires_grad_(False)
            branch = wrapper.add_branch(c.rank)
            if task > 0 and c.wtp.init_from_previous:
                with torch.no_grad():
                    branch.down.copy_(wrapper.branches[task - 1].down)
                    branch.up.copy_(wrapper.branches[task - 1].up)
            elif c.lora_init == "reference":
                reference_down_init(branch.down)
            new += [branch.down, branch.up]
        return new

    def prototypes(self, task: int) -> Optional[Tensor]:
        """(P, D) rows the regulariser contrasts with: the old classes' means, or all their centroids."""
        old = self.old_classes(task)
        if not old:
            return None
        store = self.instructed
        if self.c.wtp.prototypes == "centroids" and store.kind == "multi_centroid":
            return torch.cat([store.stats[int(k)]["centroids"] for k in old]).float().to(self.device)
        return store.means(old).to(self.device)

    @hooked_stage("wtp")
    def train_wtp(self, task: int, loaders: TaskLoaders) -> None:
        """Stage WTP (a public hook point: :mod:`norga.methods.hooks`): task ``task``'s LoRA and the head on
        ``loaders.train``'s batches, CE + the regulariser against earlier tasks' prototypes."""
        w, tuned, head = self.c.wtp, self.tuned, self.head
        lora_params = self.start_task(task)
        self.hooks.notify("task_started", self, task)  # a declared hook point (hooks.py)
        lr = self.lr_scaled(w.lr, w.batch_size)
        optimizer = torch.optim.Adam([{"params": lora_params, "lr": lr},
                                      {"params": list(head.parameters()), "lr": lr * w.head_lr_scale}],
                                     betas=(0.9, 0.999), weight_decay=0.0)
        prototypes = self.prototypes(task)
        regulariser = REGULARISERS[w.reg_form]

        def forward(batch):
            x, y = batch
            feats = tuned(to_device(x, self.device), task)
            return {"features": feats, "logits": head(feats), "labels": to_device(y, self.device)}

        def reg(out):
            if w.reg == 0:
                return out["features"].new_zeros(())
            return w.reg * regulariser(out["features"], prototypes, w.temperature)

        scheduler = epoch_scheduler(optimizer, w.schedule, w.epochs, w.milestones, w.gamma, w.min_lr,
                                    w.schedule_stepping, w.warmup_epochs, w.warmup_lr)
        self.model.eval()  # the frozen backbone has no dropout in the reference (drop 0, drop-path 0)
        run_stage(Stage("wtp", task, w.epochs, optimizer, scheduler, w.grad_clip, lora_params + list(head.parameters()),
                        train_modules=[head], lr_key=self.config_key("wtp.lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task)), "reg": reg})
        head.eval()
        for p in lora_params:
            p.requires_grad_(False)
        if task > 0 and w.momentum > 0:
            self.mix_task_lora(task, w.momentum)

    @torch.no_grad()
    def mix_task_lora(self, task: int, momentum: float) -> None:
        """The reference's lora_momentum: A_t and B_t of every block mixed with the mean of tasks < t's factors."""
        for wrapper in self.wrappers.values():
            branches = list(wrapper.branches)[:task + 1]
            for name in ("down", "up"):
                mixed = mix_with_previous([getattr(b, name) for b in branches], momentum)
                getattr(branches[task], name).copy_(mixed)

    # ---- prediction -----------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """TII's task per sample, that task's LoRA, psi; a (sample, task LoRA) pair's features come from ``cache``
        after their first computation (a task's LoRA never changes once the task is learned)."""
        x, task, index, n = batch.images, batch.task, batch.index, batch.size
        tasks = self.tii.tasks(batch, cache)
        pick = lambda k, m: k  # noqa: E731 - the "prompt" of id k is the task index itself
        feats = prompted_features(self.tuned, x, index, tasks, pick, cache, task, n).to(self.device)
        true_feats = prompted_features(self.tuned, x, index, torch.full_like(tasks, task), pick, cache, task,
                                       n).to(self.device)
        return Prediction(self.head(feats), self.head(true_feats), tasks)

    def new_eval_cache(self) -> FeatureCache:
        return FeatureCache()

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        """State after ``task``: every task LoRA, both heads, the statistics of this task's classes."""
        classes = set(self.task_classes[task])
        pick = lambda store: {k: v for k, v in store.state_dict()["stats"].items() if k in classes}  # noqa: E731
        return {"task": task, "branches": branch_state(self.wrappers), "head": self.head.state_dict(),
                "tii_head": self.tii_head.state_dict(), "uninstructed_stats": pick(self.uninstructed),
                "instructed_stats": pick(self.instructed), **self.tii.state_dict()}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        load_branches(self.wrappers, state["branches"])
        self.head.load_state_dict(state["head"])
        self.tii_head.load_state_dict(state["tii_head"])
        self.tii.load_state_dict(state)
        if with_training_state:
            self.uninstructed.stats.update({int(k): v for k, v in state["uninstructed_stats"].items()})
            self.instructed.stats.update({int(k): v for k, v in state["instructed_stats"].items()})

    # ---- description ----------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        c = self.c
        tasks = len(next(iter(self.wrappers.values())).branches)
        norms = [float(torch.stack([w.branches[k].product().norm() for w in self.wrappers.values()]).norm())
                 for k in range(tasks)]
        return {"name": self.name, "lora_layers": self.layers, "lora_targets": list(c.lora_targets), "rank": c.rank,
                "scaling": c.alpha / c.rank, "task_lora_norms": norms}  # ||(B A)_k|| over blocks, per task

    def summary(self) -> str:
        c = self.c
        return (f"method: hidelora (a LoRA per task on {'/'.join(c.lora_targets)} of blocks {self.layers}, rank "
                f"{c.rank}, scale {c.alpha / c.rank:g}; {self.tii.summary}, TAP on {c.stats.kind} statistics)")
