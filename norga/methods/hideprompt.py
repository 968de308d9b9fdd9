"""HiDe-Prompt (``hideprompt``: the linear gate) and NoRGa (``norga``: a non-linear residual gate) as registered
methods.

``learn_task(t, loaders)`` runs, for task t (paper Algorithm 1):

1. uninstructed statistics: Gaussians of frozen features of the task's classes;
2. TII: head omega trained on the task, then (t > 0) aligned on pseudo-features
   of all seen classes (eq. 59);
3. WTP: prompt e_t (initialised from e_{t-1}) through the ensemble
   p_t = (1-m) e_t + m mean(e_<t) and the classifier head psi (eq. 57); the
   gate's parameters train on the tasks its :meth:`~norga.models.Gate.trains_on`
   names (NoRGa: the first) and are frozen otherwise; with
   ``wtp.prompt_writeback`` (the authors' code) e_t is then overwritten by p_t;
4. instructed statistics: Gaussians of features prompted with p_t;
5. TAP: psi aligned on pseudo-features of all seen classes (eq. 58); the
   authors' code skips it after task 0 (``tap.after_first_task: false``).

Prediction (per sample, never a batch vote): frozen features -> TII -> task id
-> that task's prompt -> psi. Where the authors' code and the paper differ,
the config chooses (docs/fidelity.md). ``prompt_length: 0`` is the frozen-
backbone reference: the same TII and TAP, psi trained on frozen features.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from ..toolkit.feature_cache import FeatureCache, prompted_features
from ..toolkit.gaussian import GaussianStore
from ..toolkit.heads import TaskIdentityHead, init_linear_layers
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import task_generator
from ..toolkit.stages import REGULARISERS, extract_features, fit_on_features
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from ..models import PromptPool
from . import hideprompt_diagnostics as diagnostics
from . import register_method
from .base import Prediction, PrefixMethod, TaskLoaders, TestBatch
from .hide_stages import HiDeStages
from .hooks import hooked_stage


@register_method("hideprompt")
class HiDePrompt(HiDeStages, PrefixMethod):
    """Prompts, gates, heads and statistics of one HiDe-Prompt / NoRGa run."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model = self.gated_prefix_model(vit, c.prompt_layers)
        dim = self.model.embed_dim
        self.prompted = c.prompt_length > 0 and len(self.model.prompt_layers) > 0
        shape = self.model.prompt_shape(max(c.prompt_length, 1))
        self.pool = PromptPool(self.num_tasks, *shape[:1], *shape[2:], init=c.prompt_init,
                               scale=c.prompt_init_scale).to(device) if self.prompted else None
        self.task_prompts = torch.zeros(self.num_tasks, *shape, device=device) if self.prompted else None
        self.head = init_linear_layers(torch.nn.Linear(dim, self.num_classes), c.head_init).to(device)
        tii_head = TaskIdentityHead(dim, self.num_classes, c.tii.mlp_ratios, c.tii.mlp_style)
        self.tii_head = init_linear_layers(tii_head, c.head_init).to(device)
        s = c.stats
        self.uninstructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed, s.centroid_sampling)
        self.instructed = GaussianStore(s.kind, s.ridge, s.n_centroids, cfg.seed, s.centroid_sampling)
        self.diagnostics: Dict[int, dict] = {}  # task -> hideprompt_diagnostics.task_diagnostics(...)
        # the last WTP, for the diagnostics: e_t before and after training (before write-back), per-epoch terms
        self.wtp_start: Optional[Tensor] = None
        self.wtp_end: Optional[Tensor] = None
        self.wtp_history: List[Dict[str, float]] = []

    @property
    def train_batch_size(self) -> int:
        return self.c.wtp.batch_size

    # ---- the task -----------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c, seed = self.c, self.cfg.seed
        frozen, labels = self.frozen_pass(self.model, loaders.train_plain)
        self._add_statistics(self.uninstructed, frozen, labels, task)
        self.train_tii(task, loaders, frozen, labels)
        if self.prompted:
            self.train_wtp(task, loaders)
            prompt = self.task_prompts[task]
            with self.hooks.stage("statistics"):
                prompted, _ = extract_features(self.model, loaders.train_plain, self.device, prompt,
                                               "prompted feats")
        else:  # reference without prompts: the classifier learns on frozen features
            fit_on_features(self.head, frozen, labels, self.task_mask(task), c.wtp.epochs,
                            self.lr_scaled(c.wtp.lr, c.wtp.batch_size) * c.wtp.head_lr_scale, c.wtp.batch_size,
                            task_generator(seed, task, 4), self.device, stage="head", task=task,
                            lr_key=self.config_key("wtp.lr"))
            prompted = frozen
        self._add_statistics(self.instructed, prompted, labels, task)
        diagnose = c.diagnostics and self.prompted
        head_after_wtp = {k: v.detach().clone() for k, v in self.head.state_dict().items()} if diagnose else None
        self.train_tap(task)
        if diagnose:
            self.diagnostics[task] = diagnostics.task_diagnostics(
                self, task, loaders, frozen, prompted, labels, head_after_wtp, self.wtp_start, self.wtp_end)

    @hooked_stage("wtp")
    def train_wtp(self, task: int, loaders: TaskLoaders) -> None:
        """Stage WTP (eq. 57; a public hook point: :mod:`norga.methods.hooks`): prompt e_t (+ the gates on the tasks
        they train on) and psi, CE + lambda * regulariser, on ``loaders.train``."""
        w, model, pool = self.c.wtp, self.model, self.pool
        if task > 0:
            pool.init_from(task, task - 1)
        pool.train_only(task)
        self.wtp_start = pool.prompts[task].detach().clone()  # e_t^0, for the diagnostics
        gate_params = model.gate_parameters_for(task)
        prompt_params = [pool.prompts[task]]
        lr = self.lr_scaled(w.lr, w.batch_size)
        optimizer = torch.optim.Adam([{"params": prompt_params + gate_params, "lr": lr},
                                      {"params": list(self.head.parameters()), "lr": lr * w.head_lr_scale}],
                                     betas=(0.9, 0.999), weight_decay=0.0)
        old = self.old_classes(task)
        prototypes = self.instructed.means(old).to(self.device) if old else None
        regulariser = REGULARISERS[w.reg_form]

        def forward(batch):
            x, y = batch
            feats = model(x.to(self.device), pool.ensembled(task, w.momentum))
            return {"features": feats, "logits": self.head(feats), "labels": y.to(self.device)}

        def reg(out):
            if w.reg == 0:
                return out["features"].new_zeros(())
            return w.reg * regulariser(out["features"], prototypes, w.temperature)

        scheduler = epoch_scheduler(optimizer, w.schedule, w.epochs, w.milestones, w.gamma, w.min_lr,
                                    w.schedule_stepping)
        self.wtp_history = run_stage(
            Stage("wtp", task, w.epochs, optimizer, scheduler, w.grad_clip, prompt_params + gate_params +
                  list(self.head.parameters()), train_modules=[model, self.head], describe=self.gate_values,
                  lr_key=self.config_key("wtp.lr")),
            batches=lambda epoch: loaders.train, forward=forward,
            terms={"ce": cross_entropy_term(self.task_mask(task), w.label_smoothing), "reg": reg})
        model.eval()
        pool.prompts[task].requires_grad_(False)
        model.freeze_gates()
        self.wtp_end = pool.prompts[task].detach().clone()  # e_t before write-back, for the diagnostics
        with torch.no_grad():
            self.task_prompts[task] = pool.ensembled(task, w.momentum).detach()
            if w.prompt_writeback:  # authors' code: the stored e_t becomes p_t (next init and later means use it)
                pool.prompts[task].copy_(self.task_prompts[task])

    # ---- prediction -----------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """Frozen test features never change, and a test sample's features under task k's prompt never change once
        task k is learned (prompt and gates frozen then): each (sample, prompt) pair comes from ``cache`` after
        its first computation."""
        x, task, index, n = batch.images, batch.task, batch.index, batch.size
        frozen = self.frozen_query(batch, cache)
        tasks = self.tii_tasks(frozen, batch.seen)
        if not self.prompted:
            feats = true_feats = frozen
        else:
            feats = prompted_features(self.model, x, index, tasks, self.task_prompts, cache, task, n).to(self.device)
            true_feats = prompted_features(self.model, x, index, torch.full_like(tasks, task), self.task_prompts,
                                           cache, task, n).to(self.device)
        return Prediction(self.head(feats), self.head(true_feats), tasks)

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        """State after ``task``: small modules in full, statistics of this task's classes only."""
        classes = set(self.task_classes[task])
        pick = lambda store: {k: v for k, v in store.state_dict()["stats"].items() if k in classes}  # noqa: E731
        return {
            "task": task,
            "prompts": self.pool.state_dict() if self.prompted else None,
            "task_prompts": self.task_prompts.cpu() if self.prompted else None,
            "gates": self.model.gate_state(),
            "head": self.head.state_dict(),
            "tii_head": self.tii_head.state_dict(),
            "uninstructed_stats": pick(self.uninstructed),
            "instructed_stats": pick(self.instructed),
            "diagnostics": self.diagnostics.get(task),
        }

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        if self.prompted:
            self.pool.load_state_dict(state["prompts"])
            self.task_prompts.copy_(state["task_prompts"].to(self.device))
            for p in self.pool.prompts:
                p.requires_grad_(False)
        self.model.load_gate_state(state["gates"])
        self.head.load_state_dict(state["head"])
        self.tii_head.load_state_dict(state["tii_head"])
        if state.get("diagnostics"):
            self.diagnostics[int(state["task"])] = state["diagnostics"]
        if with_training_state:
            self.uninstructed.stats.update({int(k): v for k, v in state["uninstructed_stats"].items()})
            self.instructed.stats.update({int(k): v for k, v in state["instructed_stats"].items()})

    # ---- description ----------------------------------------------------
    def gate_values(self) -> Dict[str, List[float]]:
        """What each prompted layer's gate reports, as lists over layers (NoRGa: alpha, tau; linear: nothing)."""
        return self.model.gate_values()

    def describe(self) -> Dict[str, Any]:
        c = self.c
        prompts = self.task_prompts.flatten(1).norm(dim=1).tolist() if self.prompted else []
        return {"name": self.name, "gate": {**self.gate.spec, **self.gate_values()},
                "prompt_layers": list(self.model.prompt_layers), "prompt_length": c.prompt_length,
                "prompt_norms": prompts, "diagnostics": [self.diagnostics[t] for t in sorted(self.diagnostics)]}

    def task_summary(self, task: int) -> str:
        return diagnostics.summary(self.diagnostics.get(task))

    def summary(self) -> str:
        gate = ", ".join(f"{k}={v}" for k, v in self.gate.spec.items())
        return (f"method: {self.name}, gate: {gate}, prompt length {self.c.prompt_length} on blocks "
                f"{list(self.model.prompt_layers)}")


@register_method("norga")
class NoRGa(HiDePrompt):
    """NoRGa (``method.name: norga``): the HiDe-Prompt pipeline with the gate of ``method.gate`` (NoRGa by default)."""
