"""SLCA as a registered method: the whole backbone fine-tuned slowly, one linear head per task, and after each
task classifier alignment on features sampled from stored class Gaussians.

Slow learner (task t): a new head W_t (n_t, D), b_t (trunc_normal(0.02), zero bias) joins the heads of tasks
0..t-1, which stay fixed. Features f = ViT(x) (B, D) (the class token after the final norm) of augmented images;
the cross-entropy of the logits of task t's classes (B, n_t) trains every backbone tensor at lr x
``backbone_lr_scale`` and W_t, b_t at lr, by SGD with momentum and weight decay on both groups, the lr divided
by 1 / gamma at each of ``milestones`` (epochs). ``backbone_lr_scale: 0`` keeps the backbone frozen.

Statistics: after the slow learner, each class c of task t stores mu_c (D,) and Sigma_c + ridge I (D, D) of
the tuned backbone's features of its un-augmented training images (:class:`~norga.toolkit.gaussian.GaussianStore`).
Classes of earlier tasks keep the statistics of their own task (their images are gone).

Classifier alignment (tasks t > 0): a copy of the heads 0..t trains for ``ca_epochs`` epochs, each on
``ca_samples_per_class`` fresh samples per seen class from N(s_i mu_c, Sigma_c) with s_i = 1 - m + m (i + 1) /
(t + 1) for a class of task i (``ca_mean_shrink`` m), shuffled into batches of ``ca_samples_per_class``; SGD
with momentum and weight decay, cosine decay over the epochs. With ``ca_logit_norm`` T > 0 the loss is the
cross-entropy over the seen classes of z / (n T) with n = mean over tasks i <= t of ||z_i||_2 (z_i: the (B, n_i)
logits of task i; :func:`~norga.methods.slca_heads.task_normalised_logits`); T = 0: of z itself.

Prediction: the aligned heads on the tuned backbone's features, (B, C) with -inf for classes not learned yet;
no task id is inferred. ``ca_heads: restore`` (official) keeps the slow learner's heads for the next task (each
alignment starts from them); ``keep`` continues from the aligned ones. The state after a task holds the whole
fine-tuned backbone (so ``norga eval --from`` needs nothing else), both sets of heads and the statistics.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List

from torch import nn

from ..models.prompted_vit import PromptedViT
from ..toolkit.gaussian import GaussianStore, draw_generator
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import task_generator
from ..toolkit.stages import extract_features
from ..toolkit.training import Stage, cross_entropy_term, run_stage, shuffled_batches
from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch
from .slca_heads import TaskHeads, mean_scales, shifted_samples, task_normalised_logits

_CA_STAGE = 1  # stage of task_generator: the alignment's samples and shuffles


@register_method("slca")
class SLCA(Method):
    """``model`` (the backbone, trainable unless backbone_lr_scale is 0), ``heads`` (the slow learner's, one per
    task), ``aligned`` (the heads after alignment: what predicts), ``store`` (class Gaussians)."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = cfg.method
        self.model = PromptedViT(vit, prompt_layers=()).to(device)  # no prefixes: timm's forward
        self.tune_backbone = self.c.backbone_lr_scale > 0
        self.model.vit.requires_grad_(self.tune_backbone)  # every backbone tensor trains, or none
        self.heads = TaskHeads(self.model.embed_dim, self.task_classes).to(device)
        self.aligned = copy.deepcopy(self.heads)
        s = self.c.stats
        self.store = GaussianStore(s.kind, s.ridge, s.n_centroids, seed=cfg.seed, centroid_sampling=s.centroid_sampling)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    # ---- training ----------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        self.slow_learner(task, loaders)
        self.store_statistics(task, loaders)
        self.aligned = copy.deepcopy(self.heads)
        if task > 0 and self.c.ca_epochs > 0:
            self.align(task)
            if self.c.ca_heads == "keep":
                self.heads.load_state_dict(self.aligned.state_dict())
        self.aligned.eval()

    def parameter_groups(self, head: nn.Module) -> List[Dict[str, Any]]:
        """SGD groups: the backbone at lr x backbone_lr_scale (left out when 0), the new head at lr."""
        c = self.c
        groups = [{"params": list(head.parameters()), "lr": c.lr, "weight_decay": c.weight_decay}]
        if self.tune_backbone:
            backbone = [p for p in self.model.vit.parameters() if p.requires_grad]
            groups.insert(0, {"params": backbone, "lr": c.lr * c.backbone_lr_scale, "weight_decay": c.weight_decay})
        return groups

    def slow_learner(self, task: int, loaders: TaskLoaders) -> None:
        """Task ``task``'s new head and (slowly) the backbone on the task's cross-entropy."""
        c, model, heads = self.c, self.model, self.heads
        heads.requires_grad_(False)
        head = heads.add(self.device)
        optimizer = make_optimizer("sgd", self.parameter_groups(head), c.lr, c.weight_decay, c.momentum)
        scheduler = epoch_scheduler(optimizer, "step", c.epochs, c.milestones, c.gamma)

        def forward(batch):
            x, y = batch
            return {"logits": heads(model(x.to(self.device))), "labels": y.to(self.device)}

        run_stage(Stage("slca", task, c.epochs, optimizer, scheduler, train_modules=[model, heads],
                        lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task))})
        model.eval()
        heads.eval()

    def store_statistics(self, task: int, loaders: TaskLoaders) -> None:
        """Gaussian statistics of task ``task``'s classes under the tuned backbone (un-augmented images)."""
        feats, labels = extract_features(self.model, loaders.train_plain, self.device, desc="slca statistics")
        for c in self.task_classes[task]:
            chosen = feats[labels == c]
            if len(chosen) < 2:
                raise ValueError(f"class {c} of task {task} has {len(chosen)} training images; its Gaussian "
                                 "needs at least 2")
            self.store.add(c, chosen)

    def align(self, task: int) -> None:
        """Classifier alignment of the heads 0..``task`` (``self.aligned``) on sampled features."""
        c, heads = self.c, self.aligned
        heads.requires_grad_(True)
        classes = self.seen_classes(task)
        scales = mean_scales(self.class_to_task[classes], task, c.ca_mean_shrink)
        generator = task_generator(self.cfg.seed, task, _CA_STAGE)
        optimizer = make_optimizer("sgd", heads.parameters(), c.ca_lr, c.weight_decay, c.momentum)

        draws = draw_generator(generator, self.device)  # the CPU generator itself on the CPU (numbers unchanged)

        def batches(epoch: int):
            feats, labels = shifted_samples(self.store, classes, scales, c.ca_samples_per_class, draws)
            self.hooks.notify("alignment_samples", feats, labels, generator)  # a declared hook point (hooks.py)
            return shuffled_batches(feats, labels, c.ca_samples_per_class, generator)

        def forward(batch):
            parts = heads.per_task(batch[0].to(self.device))
            if c.ca_logit_norm > 0:
                parts = task_normalised_logits(parts, c.ca_logit_norm)
            return {"logits": heads.place(parts), "labels": batch[1].to(self.device)}

        run_stage(Stage("slca_align", task, c.ca_epochs, optimizer, epoch_scheduler(optimizer, "cosine", c.ca_epochs),
                        train_modules=[heads], lr_key=self.config_key("ca_lr")),
                  batches=batches, forward=forward, terms={"ce": cross_entropy_term(self.seen_mask(task))})

    # ---- prediction ----------------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        """(B, C) aligned-head logits of the tuned backbone's features, with and without the task id alike."""
        logits = self.aligned(self.model(batch.images).float())
        return Prediction(logits, logits)

    # ---- state ---------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        backbone = ({k: v.detach().cpu() for k, v in self.model.vit.state_dict().items()} if self.tune_backbone
                    else {})
        return {"backbone": backbone, "num_heads": len(self.heads.heads),
                "heads": {k: v.cpu() for k, v in self.heads.state_dict().items()},
                "aligned": {k: v.cpu() for k, v in self.aligned.state_dict().items()},
                "stats": self.store.state_dict()}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        if self.tune_backbone:
            self.model.vit.load_state_dict(state["backbone"])
        while len(self.heads.heads) < state["num_heads"]:
            self.heads.add(self.device)
        self.heads.load_state_dict(state["heads"])
        self.aligned = copy.deepcopy(self.heads)
        self.aligned.load_state_dict(state["aligned"])
        if with_training_state:
            self.store = GaussianStore.from_state_dict(state["stats"])

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "backbone_lr": c.lr * c.backbone_lr_scale, "head_lr": c.lr,
                "heads": len(self.heads.heads), "classes_with_statistics": len(self.store.classes),
                "ca_epochs": c.ca_epochs, "ca_logit_norm": c.ca_logit_norm, "ca_heads": c.ca_heads}

    def summary(self) -> str:
        c = self.c
        backbone = (f"whole backbone at lr {c.lr * c.backbone_lr_scale:g}" if self.tune_backbone
                    else "backbone frozen")
        return (f"method: slca ({backbone}, a linear head per task at lr {c.lr:g}, {c.epochs} epochs; "
                f"{c.stats.kind} class Gaussians; alignment {c.ca_epochs} epochs x {c.ca_samples_per_class} "
                f"samples per class, logit norm {c.ca_logit_norm:g}, heads {c.ca_heads})")
