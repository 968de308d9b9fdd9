"""EASE as a registered method: one adapter subspace per task, prototypes over all subspaces, old classes'
prototypes in newer subspaces synthesised from class similarity.

Task t adds subspace t: a fresh bottleneck adapter on every adapted block (:mod:`norga.models.adapters`),
trained with a cosine head on task t's classes (:mod:`.adapter_stage`) and then frozen; subspaces 0..t-1 are
never trained again. phi_k(x) (D,) is the backbone's feature with adapter k switched on.

Prototypes P (C, T, D): after task t, every class c of task t gets P[c, k] = mean phi_k(x) over its
un-augmented training images, for every subspace k <= t. An old class (task i < t) has no images any more, so
its prototype in a subspace d > i is synthesised (:func:`complement`): with donors = the classes of tasks
d..t (which have real prototypes in both subspace i and subspace d),

    W = softmax_j cos(P[old, i], P[donor_j, i])    (n_old, n_donors), row-wise over donors (official;
                                                   ``complement_softmax: old_classes``: column-wise, eq. 8)
    P[old, d] = W @ P[donors, d].

``recalc_similarity`` (official) redoes this for every d in i+1..t after each task; otherwise only d = t.

Test: the features of all learned subspaces [phi_0(x), ..., phi_t(x)]. ``reweight`` (official): the logit of
class c of task i is sum_k w_ik cos(phi_k(x), P[c, k]) with w_ii = 1 and w_ik = alpha / t otherwise
(:func:`subspace_weights`); without it, the cosine of the whole concatenated vectors. Classes not learned yet
score -inf; no task id is inferred.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.adapters import add_adapters
from ..toolkit.stages import extract_features
from . import register_method
from .adapter_stage import (TunedView, cached_features, class_means, frozen_adapter_blocks,
                            train_with_cosine_head)
from .base import Method, Prediction, TaskLoaders, TestBatch


SOFTMAX_AXIS = {"donors": 1, "old_classes": 0}  # complement_softmax -> the axis of W (n_old, n_donors)


def synthesise(old: Tensor, donors_old: Tensor, donors_new: Tensor, over: str = "donors") -> Tensor:
    """Old classes' prototypes in a new subspace (n_old, D) from: ``old`` (n_old, D) their prototypes in their
    own subspace; ``donors_old`` (n, D) and ``donors_new`` (n, D) the donor classes' prototypes in that subspace
    and in the new one. Softmax of the cosine similarities over the donors (``over="donors"``, the official
    code: each old class's weights sum to 1) or over the old classes (``"old_classes"``, the paper's eq. 8), then
    the weighted donor prototypes."""
    weights = torch.softmax(F.normalize(old, dim=-1) @ F.normalize(donors_old, dim=-1).T, dim=SOFTMAX_AXIS[over])
    return weights @ donors_new


def complement(prototypes: Tensor, task_classes: Sequence[Sequence[int]], task: int, recalc: bool,
               over: str = "donors") -> None:
    """Fill, in place, the prototypes (C, T, D) of old tasks' classes in the subspaces after their own, once
    task ``task`` has its real prototypes in subspaces 0..task (see the module docstring)."""
    for d in (range(1, task + 1) if recalc else [task] if task > 0 else []):
        donors = [c for j in range(d, task + 1) for c in task_classes[j]]
        for i in range(d):
            old = list(task_classes[i])
            prototypes[old, d] = synthesise(prototypes[old, i], prototypes[donors, i], prototypes[donors, d], over)


def subspace_weights(class_to_task: Tensor, subspaces: int, alpha: float, over_tasks: bool) -> Tensor:
    """(C, S) weights of the S learned subspaces per class: 1 on its own task's subspace, alpha (/ (S - 1) when
    ``over_tasks``) on the others."""
    others = alpha / (subspaces - 1) if over_tasks and subspaces > 1 else alpha
    own = class_to_task[:, None] == torch.arange(subspaces, device=class_to_task.device)[None]
    return torch.where(own, torch.ones((), device=own.device), torch.full((), others, device=own.device))


@register_method("ease")
class EASE(Method):
    """Adapters ``tuned[b][k]`` (block b, subspace k), prototypes (C, T, D), ``learned`` (C,), ``subspaces``."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        c = self.c = cfg.method
        self.model, self.layers, self.blocks, self.tuned = frozen_adapter_blocks(self, vit, c.adapter_layers)
        dim = self.model.embed_dim
        self.prototypes = torch.zeros(self.num_classes, self.num_tasks, dim, device=device)
        self.learned = torch.zeros(self.num_classes, dtype=torch.bool, device=device)
        self.subspaces = 0

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def add_subspace(self) -> List[nn.Parameter]:
        """A new adapter on every adapted block (subspace ``subspaces``); returns its parameters."""
        c = self.c
        new = add_adapters(self.blocks, self.model.embed_dim, c.bottleneck, c.adapter_scale, c.adapter_dropout)
        self.subspaces += 1
        return list(new.parameters())

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        if self.subspaces != task:
            raise RuntimeError(f"task {task} needs {task} learned subspaces, found {self.subspaces}")
        self.freeze_adapters()
        params = self.add_subspace()
        self.model.eval()  # the frozen backbone stays in eval mode; the new adapters train
        train_with_cosine_head("ease", task, TunedView(self.model, task), params, self.task_classes[task],
                               self.num_classes, loaders.train, self.c, self.model.embed_dim, self.device,
                               [self.tuned], self.config_key("lr"))
        self.freeze_adapters()
        classes = self.task_classes[task]
        for k in range(task + 1):
            feats, labels = extract_features(TunedView(self.model, k), loaders.train_plain, self.device,
                                             desc=f"subspace {k} feats")
            self.prototypes[classes, k] = class_means(feats, labels, classes).to(self.device)
        complement(self.prototypes, self.task_classes, task, self.c.recalc_similarity, self.c.complement_softmax)
        self.learned[classes] = True

    def freeze_adapters(self) -> None:
        for p in self.tuned.parameters():
            p.requires_grad_(False)
        self.tuned.eval()

    def features(self, batch: TestBatch, cache: Any) -> Tensor:
        """(B, S, D) features of a test batch in the S learned subspaces (each final once learned, so cached)."""
        return torch.stack([cached_features(self.model, batch, cache, k, self.device)
                            for k in range(self.subspaces)], dim=1)

    def logits(self, feats: Tensor) -> Tensor:
        """(B, S, D) subspace features -> (B, C) logits; -inf for classes not learned yet."""
        subspaces = feats.shape[1]
        protos = self.prototypes[:, :subspaces]
        if self.c.reweight:
            cos = torch.einsum("bsd,csd->bcs", F.normalize(feats, dim=-1), F.normalize(protos, dim=-1))
            weights = subspace_weights(self.class_to_task.to(feats.device), subspaces, self.c.alpha,
                                       self.c.alpha_over_tasks)
            scores = (cos * weights[None]).sum(-1)
        else:
            scores = F.normalize(feats.flatten(1), dim=-1) @ F.normalize(protos.flatten(1), dim=-1).T
        return scores.masked_fill(~self.learned, float("-inf"))

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        logits = self.logits(self.features(batch, cache))
        return Prediction(logits, logits)

    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"tuned": {k: v.cpu() for k, v in self.tuned.state_dict().items()}, "subspaces": self.subspaces,
                "prototypes": self.prototypes.cpu(), "learned": self.learned.cpu()}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        while self.subspaces < int(state["subspaces"]):
            self.add_subspace()
        self.tuned.load_state_dict(state["tuned"])
        self.freeze_adapters()
        self.prototypes.copy_(state["prototypes"].to(self.device))
        self.learned.copy_(state["learned"].to(self.device))

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "subspaces": self.subspaces, "adapter_layers": self.layers,
                "adapter_parameters": sum(p.numel() for p in self.tuned.parameters()),
                "reweight": c.reweight, "alpha": c.alpha, "recalc_similarity": c.recalc_similarity,
                "complement_softmax": c.complement_softmax,
                "prototypes": int(self.learned.sum())}

    def summary(self) -> str:
        c = self.c
        how = f"reweighted (alpha {c.alpha:g})" if c.reweight else "one cosine over the concatenation"
        return (f"method: ease (a new adapter subspace per task on blocks {self.layers}, r={c.bottleneck}, "
                f"{c.epochs} epochs each; prototypes over all subspaces, {how})")
