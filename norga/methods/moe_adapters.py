"""LoRAMoE and MH-MoE adapters as continual-learning methods on the frozen ViT (``lora_moe``, ``mh_moe``).

Every adapted block's MLP gets a routed LoRA-expert adapter beside it
(:mod:`norga.models.moe_adapters`); routers and experts are shared by all tasks and keep
training on each new task (no task id anywhere: routing is per token, inference is
task-agnostic). One linear head over all classes.

Training task t: AdamW on the adapters and the head, cosine schedule, cross-entropy over
task t's classes (the other logits masked, as the prompt baselines train their heads).
Classifier protocol (``classifier``), the same for both methods in every comparison:

* ``aligned`` (default): after training, Gaussian statistics of task t's classes are
  computed from the adapted features of its un-augmented images, and the head is
  re-trained on pseudo-features of every seen class (HiDe-Prompt's TAP recipe: SGD,
  momentum 0.9, cosine). Chosen because it calibrates the head across tasks without
  replay, so what is left of forgetting is the drift of the adapted features — the
  interference of shared routes the MH-MoE paper is about. Old classes keep the
  statistics of the features they had when learned; features that drift away from them
  are misclassified, and that shows as forgetting.
* ``ce``: the head only ever sees each task's cross-entropy.

Prediction: argmax over the seen classes of ``head(features)``; with the true task id,
the same logits restricted to that task's classes (by the evaluation).
"""
from __future__ import annotations

from typing import Any, Dict

import torch
from torch import Tensor, nn

from ..toolkit.gaussian import GaussianStore
from ..toolkit.heads import init_linear_layers
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import task_generator
from ..toolkit.stages import align_head, extract_features
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from ..models.moe_adapters import HeadwiseLoRAMoE, attach_adapters
from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch, chosen_blocks

ALIGN_STAGE = 7  # task_generator stage id of the head alignment's sampling


class MoEAdapterMethod(Method):
    """Shared implementation; ``heads`` = 1 for LoRAMoE."""

    heads = 1

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model = self.frozen_token_model(vit)  # freezes every backbone weight before the adapters exist
        layers = chosen_blocks(vit, c.adapter_layers, "method.adapter_layers")
        dim = self.model.embed_dim
        self._check_shape(dim)
        self.adapters = attach_adapters(vit, layers, lambda: HeadwiseLoRAMoE(dim, self.heads, c.experts, c.top_k,
                                                                               c.rank)).to(device)
        self.layers = layers
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), "pytorch").to(device)
        self.stats = GaussianStore(c.stats_kind, seed=cfg.seed)

    def _check_shape(self, dim: int) -> None:
        from ..config import ConfigError

        if self.c.top_k > self.c.experts:
            raise ConfigError(f"method.top_k={self.c.top_k} exceeds method.experts={self.c.experts}")
        if dim % self.heads:
            raise ConfigError(f"method.heads={self.heads} does not divide the backbone width {dim}; choose a "
                              "divisor of it")

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    # ---- training ----------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        self._train_adapters(task, loaders)
        if self.c.classifier == "aligned":
            feats, labels = extract_features(self.model, loaders.train_plain, self.device, desc="adapted feats")
            for cls in self.task_classes[task]:
                self.stats.add(cls, feats[labels == cls])
            c = self.c
            align_head(self.head, self.stats, self.seen_classes(task), self.num_classes, c.align_epochs, c.align_lr,
                       c.align_samples_per_class, c.batch_size, task_generator(self.cfg.seed, task, ALIGN_STAGE),
                       self.device, stage="align", task=task, lr_key=self.config_key("align_lr"))
        self.head.eval()

    def _train_adapters(self, task: int, loaders: TaskLoaders) -> None:
        c, model, head = self.c, self.model, self.head
        params = [*self.adapters.parameters(), *head.parameters()]
        optimizer = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay, betas=(0.9, 0.95), eps=1e-6)
        model.eval()  # the frozen backbone stays in eval mode; the adapters have no dropout

        def forward(batch):
            x, y = batch
            return {"logits": head(model(x.to(self.device))), "labels": y.to(self.device)}

        run_stage(Stage("moe", task, c.epochs, optimizer, epoch_scheduler(optimizer, "cosine", c.epochs),
                        clip=c.grad_clip, clip_params=params, train_modules=[head], lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task))})

    # ---- prediction -----------------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        logits = self.predict_logits(batch.images)
        return Prediction(logits, logits)

    @torch.no_grad()
    def predict_logits(self, images: Tensor) -> Tensor:
        """Images (B, 3, H, W) on the device -> class logits (B, C) over all classes."""
        self.model.eval()
        return self.head(self.model(images).float())

    def record_routes(self, on: bool) -> None:
        """Make every adapter keep its last routing decision (:meth:`last_routes`)."""
        for adapter in self.adapters.values():
            adapter.record, adapter.last_routes = on, None

    def last_routes(self) -> Dict[int, Tensor]:
        """Block -> selected experts (B * T, H, k) of the last forward (tokens in batch-major order)."""
        return {int(i): adapter.last_routes for i, adapter in self.adapters.items()}

    # ---- state ---------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        classes = set(self.task_classes[task])
        return {"adapters": {k: v.cpu() for k, v in self.adapters.state_dict().items()},
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()},
                "stats": {k: v for k, v in self.stats.state_dict()["stats"].items() if k in classes}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        self.adapters.load_state_dict(state["adapters"])
        self.head.load_state_dict(state["head"])
        self.stats.stats.update({int(k): v for k, v in state["stats"].items()})

    def activated_parameters(self) -> int:
        """Adapter parameters one token uses per adapted layer: H k r (D/H + D) (routers not counted)."""
        dim, c = self.model.embed_dim, self.c
        return self.heads * c.top_k * c.rank * (dim // self.heads + dim)

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "heads": self.heads, "experts": c.experts, "top_k": c.top_k, "rank": c.rank,
                "adapter_layers": self.layers, "classifier": c.classifier,
                "activated_parameters_per_token_and_layer": self.activated_parameters(),
                "trainable_parameters": sum(p.numel() for p in self.adapters.parameters()),
                "routing_outcomes_per_layer": self.routing_outcomes()}

    def routing_outcomes(self) -> int:
        """Distinct routing decisions of one layer: C(K, k)^H."""
        from math import comb

        return comb(self.c.experts, self.c.top_k) ** self.heads

    def summary(self) -> str:
        c = self.c
        return (f"method: {self.name} (LoRA experts beside the MLP of blocks {self.layers}: H={self.heads}, "
                f"K={c.experts}, top-{c.top_k}, rank {c.rank}; classifier {c.classifier})")


@register_method("lora_moe")
class LoRAMoE(MoEAdapterMethod):
    """One router on the full token state (H = 1)."""


@register_method("mh_moe")
class MHMoE(MoEAdapterMethod):
    """H head-aligned slices, each with its own router and private experts."""

    def __init__(self, vit, task_classes, cfg, device):
        self.heads = cfg.method.heads
        super().__init__(vit, task_classes, cfg, device)
