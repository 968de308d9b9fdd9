"""MOS (model surgery) as a registered method: one bottleneck adapter set trained per task and merged towards the
earlier tasks' adapters, a linear head re-aligned on Gaussian class statistics, self-refined adapter retrieval.

Every adapted block b carries ``tuned[b]``: slot 0 is the adapter being trained (it continues from task to task,
as the reference's ``cur_adapter``), slot 1 + k task k's test adapter; ``sums[b]`` holds S, the sum of the adapters
saved so far (:mod:`.mos_parts` has the formulas). phi_k(x) (D,) is the backbone's feature with test adapter k.

Task t (images x (B, 3, H, W), labels y):
  1. train slot 0 and the head (C, D) (at lr x ``head_lr_factor``) with SGD + cosine decay on
     CE(head(f), y) over task t's classes + reg * CE(M M^T / temperature, arange(n)), M = [class means of tasks
     < t (n_old, D); f (B, D)], f the features under slot 0; the merge runs after every step (and, ``merge:
     per_block``, before every adapted block of every forward with slot 0);
  2. save the test adapter of task t, then add slot 0 to S;
  3. Gaussian statistics (mean, covariance + ridge) of task t's classes from slot-0 features of the un-augmented
     training images (``stats_adapter: merging``: training forwards, class by class, merging slot 0 towards
     S_t / t, S_t the sum before step 2); the prototypes (C, D) of its classes = mean phi_0 features (after the
     first task with adapter 0's dropout on under ``prototype_dropout``, as the code);
  4. t > 0: the head alone trains on pseudo-features sampled from the statistics of every seen class.
Test: o = cos(phi_0(x), prototypes) (B, C); the retrieval from the task of argmax o picks adapter k and its head
logits z (B, C); the answer is softmax(z) + softmax(T o) (``ensemble``) or z.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.adapters import BottleneckAdapter, add_adapters, tuning
from ..toolkit.gaussian import GaussianStore
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import named_generator, task_generator
from ..toolkit.stages import align_head, extract_features, official_contrastive_regulariser
from ..toolkit.devices import to_device
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from . import register_method
from .adapter_stage import TunedView, cached_features, class_means, frozen_adapter_blocks
from .base import Method, Prediction, TaskLoaders, TestBatch
from .mos_parts import accumulate_, class_loader, ensemble, merge_, refine, set_test_adapter_, zero_

_ALIGN_STAGE = 7  # task_generator stage of the classifier alignment's sampling and shuffles


@register_method("mos")
class MOS(Method):
    """``tuned[b]`` (slot 0 trained, 1 + k test adapters), ``sums[b]``, ``head`` (D -> C), ``prototypes`` (C, D),
    ``store`` (Gaussian statistics per class), ``learned_tasks``."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model, self.layers, self.blocks, self.tuned = frozen_adapter_blocks(self, vit, c.adapter_layers)
        dim = self.model.embed_dim
        add_adapters(self.blocks, dim, c.bottleneck, c.adapter_scale, c.adapter_dropout)
        self.sums = nn.ModuleList(self._adapter() for _ in self.blocks)
        zero_(self.sums)
        self.head = self._timm_head(dim, cfg.seed)
        self.prototypes = torch.zeros(self.num_classes, dim, device=device)
        self.store = GaussianStore(c.ca_statistics, c.ca_ridge, c.n_centroids, cfg.seed)
        self.learned_tasks = 0
        self._merging: Optional[Tuple[nn.ModuleList, int]] = None
        for block in self.blocks:
            block.register_forward_pre_hook(self._merge_before_block)

    def _adapter(self) -> BottleneckAdapter:
        c = self.c
        return BottleneckAdapter(self.model.embed_dim, c.bottleneck, c.adapter_scale, c.adapter_dropout).to(self.device)

    def _timm_head(self, dim: int, seed: int) -> nn.Linear:
        """A linear head (D -> C) initialised as timm's ViT head (the reference's): weights N(0, 0.02^2) (timm
        truncates at +-2, absolute, which never binds at this std), bias 0."""
        head = nn.Linear(dim, self.num_classes)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=named_generator(seed, 0, "mos.head")) * 0.02)
            head.bias.zero_()
        return head.to(self.device)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    # ---- adapters -------------------------------------------------------------------------------
    @property
    def current(self) -> List[nn.Module]:
        return [t[0] for t in self.tuned]

    def merge(self) -> None:
        merge_(self.current, self.sums, self.learned_tasks, self.c.adapter_momentum)

    def _merge_before_block(self, block, args) -> None:
        if self._merging is not None:
            merge_(self.current, *self._merging, self.c.adapter_momentum)

    @contextmanager
    def current_adapter(self, target: Optional[Tuple[nn.ModuleList, int]] = None):
        """Forwards within run slot 0, merging it before every adapted block under ``merge: per_block`` towards
        target = (sums, saved adapters) (default: the running sums over the learned tasks)."""
        if self.c.merge == "per_block":
            self._merging = target if target is not None else (self.sums, self.learned_tasks)
        try:
            with tuning(self.model, 0):
                yield
        finally:
            self._merging = None

    def _current_features(self, x: Tensor, target: Optional[Tuple[nn.ModuleList, int]] = None) -> Tensor:
        with self.current_adapter(target):
            return self.model(to_device(x, self.device))

    # ---- training -------------------------------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        if self.learned_tasks != task:
            raise RuntimeError(f"task {task} needs {task} learned tasks, found {self.learned_tasks}")
        self.train_adapter(task, loaders.train)
        earlier = copy.deepcopy(self.sums)  # S_t (tasks < t): the statistics' merge target, as the code's sum[t - 1]
        self.save_test_adapter(task)
        classes = self.task_classes[task]
        feats, labels = self.statistics_features(task, loaders.train_plain, earlier)
        for c in classes:
            self.store.add(c, feats[labels == c])
        with_dropout = self.c.prototype_dropout and task > 0
        view = _DropoutView(self.model, [t[1] for t in self.tuned]) if with_dropout else TunedView(self.model, 1)
        feats0, labels0 = extract_features(view, loaders.train_plain, self.device, desc="mos prototypes")
        self.prototypes[classes] = class_means(feats0, labels0, classes).to(self.device)
        self.learned_tasks = task + 1
        if task > 0 and self.c.ca_epochs > 0:
            self.align(task)

    def train_adapter(self, task: int, loader) -> None:
        c = self.c
        adapters = [p for a in self.current for p in a.parameters()]
        for p in [*adapters, *self.head.parameters()]:
            p.requires_grad_(True)
        groups = [{"params": adapters, "lr": c.lr},
                  {"params": list(self.head.parameters()), "lr": c.lr * c.head_lr_factor}]
        optimizer = make_optimizer("sgd", groups, lr=c.lr, weight_decay=c.weight_decay, momentum=c.momentum)
        scheduler = epoch_scheduler(optimizer, "cosine", c.epochs, min_lr=c.min_lr)
        old = self.seen_classes(task - 1) if task > 0 else []
        means = self.store.means(old).to(self.device) if old else None
        self.model.eval()  # the frozen backbone; slot 0 trains (dropout), see train_modules
        steps = [0]

        def forward(batch):
            if steps[0] > 0:
                self.merge()  # the merge after the previous optimiser step
            steps[0] += 1
            x, y = batch
            feats = self._current_features(x)
            return {"features": feats, "logits": self.head(feats), "labels": to_device(y, self.device)}

        run_stage(Stage("mos", task, c.epochs, optimizer, scheduler, train_modules=self.current,
                        lr_key=self.config_key("lr")),
                  batches=lambda epoch: loader, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task)),
                         "reg": lambda out: c.reg * official_contrastive_regulariser(out["features"], means,
                                                                                      c.reg_temperature)})
        if steps[0] > 0:
            self.merge()  # after the last step
        for p in [*adapters, *self.head.parameters()]:
            p.requires_grad_(False)

    @torch.no_grad()
    def statistics_features(self, task: int, plain, earlier: nn.ModuleList) -> Tuple[Tensor, Tensor]:
        """Features (N, D) and labels (N,) of task ``task``'s un-augmented training images (``plain``'s dataset) for
        the class statistics, dropout off. ``stats_adapter: merging`` (the code's ``_compute_mean``): class by class
        in dataset order, batches of 3 x ``batch_size``, each a training forward of slot 0, which under ``merge:
        per_block`` merges slot 0 towards ``earlier`` / task (S_t / t, ``earlier`` holding S_t) before every adapted
        block, so slot 0 leaves the statistics at about that mean (and starts task t + 1 from it); ``trained``: slot 0
        as trained, no merges. Every process of a torchrun job runs the whole pass (the merges are sequential)."""
        self.model.eval()
        self.tuned.eval()
        if self.c.stats_adapter == "trained":
            return extract_features(TunedView(self.model, 0), plain, self.device, desc="mos stats")
        feats, labels = [], []
        for x, y in class_loader(plain, self.task_classes[task], 3 * self.c.batch_size):
            feats.append(self._current_features(x, (earlier, task)).float().cpu())
            labels.append(torch.as_tensor(y))
        return torch.cat(feats), torch.cat(labels)

    def save_test_adapter(self, task: int) -> None:
        """Task ``task``'s test adapter into slot 1 + task (from slot 0 and S), then S += slot 0."""
        c = self.c
        while len(self.tuned[0]) < task + 2:
            add_adapters(self.blocks, self.model.embed_dim, c.bottleneck, c.adapter_scale, c.adapter_dropout)
        set_test_adapter_([t[task + 1] for t in self.tuned], self.current, self.sums, task, c.test_adapters)
        accumulate_(self.sums, self.current)
        for t in self.tuned:
            for p in t[task + 1].parameters():
                p.requires_grad_(False)

    def align(self, task: int) -> None:
        """Classifier alignment: the head on ``ca_samples_per_class`` pseudo-features per seen class and epoch."""
        c = self.c
        self.head.requires_grad_(True)
        n = c.ca_samples_per_class
        align_head(self.head, self.store, self.seen_classes(task), self.num_classes, c.ca_epochs, c.ca_lr, n, n,
                   task_generator(self.cfg.seed, task, _ALIGN_STAGE), self.device, stage="mos_align", task=task,
                   lr_key=self.config_key("ca_lr"), weight_decay=c.weight_decay)
        self.head.requires_grad_(False)

    # ---- prediction ------------------------------------------------------------------------------
    def prototype_logits(self, feats0: Tensor) -> Tensor:
        """(B, D) adapter-0 features -> (B, C) cosine similarities to the class prototypes (sigma = 1)."""
        return F.linear(F.normalize(feats0, dim=1), F.normalize(self.prototypes, dim=1))

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        tasks = self.learned_tasks
        feats = torch.stack([cached_features(self.model, batch, cache, 1 + k, self.device) for k in range(tasks)], 1)
        unseen = self.class_to_task.to(self.device) >= tasks
        masked = lambda logits: logits.masked_fill(unseen, float("-inf"))  # noqa: E731
        orig = masked(self.prototype_logits(feats[:, 0]))
        class_to_task = self.class_to_task.to(self.device)
        logits, chosen = refine(feats, class_to_task[orig.argmax(1)], lambda f: masked(self.head(f)), class_to_task,
                                self.c.refine_steps)
        scores = ensemble(logits, orig, tasks) if self.c.ensemble else logits
        own = min(batch.task, tasks - 1)
        return Prediction(masked(scores), masked(self.head(feats[:, own])), chosen)

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        cpu = lambda m: {k: v.cpu() for k, v in m.state_dict().items()}  # noqa: E731
        return {"tuned": cpu(self.tuned), "sums": cpu(self.sums), "head": cpu(self.head),
                "prototypes": self.prototypes.cpu(), "store": self.store.state_dict(),
                "learned_tasks": self.learned_tasks}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        c = self.c
        while len(self.tuned[0]) < int(state["learned_tasks"]) + 1:
            add_adapters(self.blocks, self.model.embed_dim, c.bottleneck, c.adapter_scale, c.adapter_dropout)
        self.tuned.load_state_dict(state["tuned"])
        self.sums.load_state_dict(state["sums"])
        self.head.load_state_dict(state["head"])
        self.prototypes.copy_(state["prototypes"].to(self.device))
        self.store = GaussianStore.from_state_dict(state["store"])
        self.learned_tasks = int(state["learned_tasks"])
        for p in [*self.tuned.parameters(), *self.head.parameters()]:
            p.requires_grad_(False)

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "learned_tasks": self.learned_tasks, "adapter_layers": self.layers,
                "adapter_parameters": sum(p.numel() for p in self.tuned.parameters()), "merge": c.merge,
                "test_adapters": c.test_adapters, "adapter_momentum": c.adapter_momentum, "ensemble": c.ensemble,
                "stats_adapter": c.stats_adapter, "prototype_dropout": c.prototype_dropout}

    def summary(self) -> str:
        c = self.c
        return (f"method: mos (adapters r={c.bottleneck} on blocks {self.layers}, {c.epochs} epochs per task, EMA "
                f"beta {c.adapter_momentum:g} {c.merge}; test adapters {c.test_adapters}; classifier alignment "
                f"{c.ca_epochs} epochs; self-refined retrieval, {c.refine_steps} steps)")


class _DropoutView(TunedView):
    """Images (B, 3, H, W) -> (B, D) features under adapter 0 (slot 1) with its dropout on (``adapters``: slot 1 of
    every block): the code's prototypes after the first task (``prototype_dropout``)."""

    def __init__(self, model: nn.Module, adapters: List[nn.Module]):
        super().__init__(model, 1)
        self.adapters = adapters  # a plain list: not registered, so extract_features' eval() leaves them alone

    def forward(self, x: Tensor, prompts=None) -> Tensor:
        for a in self.adapters:
            a.train()
        try:
            return super().forward(x)
        finally:
            for a in self.adapters:
                a.eval()

