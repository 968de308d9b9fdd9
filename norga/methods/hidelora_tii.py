"""Task-identity inference (TII) of HiDe-LoRA: the learners ``method.tii_model`` names (:data:`TII_MODELS`).

* ``frozen_head`` (:class:`FrozenHeadTII`): HiDe-Prompt's TII stage (:class:`~.hide_stages.HiDeStages`): an MLP
  head on the frozen features (B, D), aligned on pseudo-features of the frozen features' class statistics.
* ``continual_lora`` (:class:`ContinualLoRATII`): the reference's task-identity model (ivcylc/HiDe-PET: the
  ``imr_continual_lora`` run its README trains first and ``hidelora_trainer`` loads through
  ``--trained_original_model``): a second view of the backbone that shares its frozen weights, with one *shared*
  LoRA on the blocks and projections of the task LoRAs (rank ``continual_lora.rank``) and a linear head (D -> C).
  On every task t: the LoRA and the head train on the task's augmented images (Adam, CE over the task's classes; the
  LoRA at ``slow_lr`` x the head's lr, on task 0 only when ``slow_first_task``), the class statistics of the task's
  classes are taken from its features under the LoRA as trained so far (older classes keep theirs), and for t > 0
  the head is aligned on pseudo-features of every seen class. A test image's task: the head's argmax over the seen
  classes, mapped to its task.

A learner is built by the host :class:`~.hidelora.HiDeLoRA` as ``learner(host, view)`` (``view``: a
:func:`shared_weight_copy` of the backbone taken before the task LoRAs wrap it, when the class sets
``own_backbone_view``, else None); it sets ``host.tii_head`` (the head a checkpoint saves as ``tii_head``) and
offers ``learn(task, loaders) -> labels (N,)`` of ``loaders.train_plain``, ``tasks(batch, cache) -> (B,)`` inferred
task ids, and ``state_dict()`` / ``load_state_dict(state)`` of what it adds to the host's checkpoint.
"""
from __future__ import annotations

import copy
import itertools
from typing import Callable, Dict, List

import torch
from torch import Tensor, nn

from ..models.lora_qkv import attach_lora_qkv, branch_state, load_branches
from ..toolkit.heads import TaskIdentityHead, init_linear_layers, masked_logits
from ..toolkit.seeding import task_generator
from ..toolkit.stages import align_head, extract_features
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from .hidelora_parts import TaskLoRAModel, every_branch_scaled, reference_down_init

TII_MODELS: Dict[str, Callable] = {}


def register_tii(name: str):
    """Class decorator: the TII learner ``method.tii_model: name`` builds."""
    def add(cls):
        TII_MODELS[name] = cls
        cls.name = name
        return cls
    return add


def shared_weight_copy(vit: nn.Module) -> nn.Module:
    """A second module tree of ``vit`` whose parameters and buffers are ``vit``'s own tensors (no copy of weights):
    wrapping a layer of one tree leaves the other unchanged."""
    same = {id(t): t for t in itertools.chain(vit.parameters(), vit.buffers())}
    return copy.deepcopy(vit, memo=same)


@register_tii("frozen_head")
class FrozenHeadTII:
    """HiDe-Prompt's TII: ``host.tii_head`` (MLP, ``tii.*``) on the frozen features, statistics in
    ``host.uninstructed``."""

    summary = "TII on frozen features"
    own_backbone_view = False

    def __init__(self, host, view=None):
        self.host = host
        c = host.c
        tii_head = TaskIdentityHead(host.model.embed_dim, host.num_classes, c.tii.mlp_ratios, c.tii.mlp_style)
        host.tii_head = init_linear_layers(tii_head, c.head_init).to(host.device)

    def learn(self, task: int, loaders) -> Tensor:
        host = self.host
        frozen, labels = host.frozen_pass(host.model, loaders.train_plain)
        host._add_statistics(host.uninstructed, frozen, labels, task)
        host.train_tii(task, loaders, frozen, labels)
        return labels

    def tasks(self, batch, cache) -> Tensor:
        host = self.host
        return host.tii_tasks(host.frozen_query(batch, cache), batch.seen)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@register_tii("continual_lora")
class ContinualLoRATII:
    """The reference's TII model: a shared LoRA (``wrappers``, one branch per block) on a shared-weight view of the
    backbone and the linear head ``host.tii_head``; statistics of its features in ``host.uninstructed``."""

    summary = "TII by a shared continual LoRA"
    own_backbone_view = True

    def __init__(self, host, view: nn.Module):
        self.host, c = host, host.c
        self.s = c.continual_lora
        self.wrappers = attach_lora_qkv(view, host.layers, c.lora_targets).to(host.device)
        for wrapper in self.wrappers.values():
            wrapper.coefficients = self.scaling
            branch = wrapper.add_branch(self.s.rank)
            if c.lora_init == "reference":
                reference_down_init(branch.down)
        self.model = TaskLoRAModel(host.frozen_token_model(view), self.wrappers)
        host.tii_head = init_linear_layers(nn.Linear(self.model.embed_dim, host.num_classes),
                                           c.head_init).to(host.device)

    def scaling(self, wrapper) -> Tensor:
        """(1, P): alpha / r of the shared LoRA for every projection (the reference's ContinualLora: 1 / r)."""
        return every_branch_scaled(wrapper, self.host.c.alpha / self.s.rank)

    def lora_parameters(self) -> List[nn.Parameter]:
        return [p for w in self.wrappers.values() for p in w.branches[0].parameters()]

    def features(self, x: Tensor) -> Tensor:
        """Features (B, D) of images x under the shared LoRA as it is now."""
        return self.model(x, 0)

    def learn(self, task: int, loaders) -> Tensor:
        self._train(task, loaders)
        host = self.host
        feats, labels = extract_features(self.model, loaders.train_plain, host.device, 0, "tii lora feats")
        host._add_statistics(host.uninstructed, feats, labels, task)
        if task > 0:
            self._align(task)
        return labels

    def _train(self, task: int, loaders) -> None:
        """The shared LoRA and the head on the task's augmented images (Adam, constant lr, CE over the task's
        classes, gradients of both clipped together)."""
        host, s, head = self.host, self.s, self.host.tii_head
        lr = host.lr_scaled(s.lr, host.c.wtp.batch_size)
        slow = s.slow_lr if task > 0 or s.slow_first_task else 1.0
        lora = self.lora_parameters()
        for p in lora:
            p.requires_grad_(True)
        optimizer = torch.optim.Adam([{"params": lora, "lr": lr * slow}, {"params": list(head.parameters()), "lr": lr}],
                                     betas=(0.9, 0.999), weight_decay=0.0)

        def forward(batch):
            x, y = batch
            feats = self.features(x.to(host.device))
            return {"logits": head(feats), "labels": y.to(host.device)}

        self.model.model.eval()  # the frozen backbone (the reference: drop 0, drop-path 0)
        run_stage(Stage("tii", task, s.epochs, optimizer, clip=s.grad_clip, clip_params=lora + list(head.parameters()),
                        train_modules=[head], lr_key=host.config_key("continual_lora.lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(host.task_mask(task))})
        head.eval()
        for p in lora:
            p.requires_grad_(False)

    def _align(self, task: int) -> None:
        """The head on pseudo-features of every seen class (SGD momentum 0.9, no weight decay, cosine: the
        reference's classifier alignment, whose parameter group's ``args.weight_decay`` = 0 overrides the 5e-4 of
        its ``optim.SGD`` call)."""
        host, s = self.host, self.s
        align_head(host.tii_head, host.uninstructed, host.seen_classes(task), host.num_classes, s.align_epochs,
                   s.align_lr, s.samples_per_class, s.align_batch_size, task_generator(host.cfg.seed, task, 2),
                   host.device, "tii_align", host._align_batches(s.align_batches, task), task,
                   lr_key=host.config_key("continual_lora.align_lr"))

    @torch.no_grad()
    def tasks(self, batch, cache) -> Tensor:
        """(B,) tasks of a test batch: the head's argmax over the seen classes of the features under the shared
        LoRA (computed afresh: the LoRA changes with every task)."""
        host = self.host
        self.model.eval()
        logits = host.tii_head(self.features(batch.images.to(host.device)))
        classes = masked_logits(logits, batch.seen).argmax(dim=1)
        return host.class_to_task.to(classes.device)[classes]

    def state_dict(self) -> dict:
        return {"tii_lora": branch_state(self.wrappers)}

    def load_state_dict(self, state: dict) -> None:
        if "tii_lora" not in state:
            raise KeyError("this checkpoint has no shared TII LoRA (tii_lora): it was written with "
                           "method.tii_model=frozen_head; load it with that setting")
        load_branches(self.wrappers, state["tii_lora"])
