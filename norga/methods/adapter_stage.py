"""What APER, EASE, MOS, TUNA and RanPAC's first session share: attaching a tuning to the frozen ViT, training tuned
parameters through a cosine head on one task's classes, and class means of features (their prototypes).

The training stage is the APER/EASE code's: a fresh :class:`~norga.models.adapters.CosineHead` over the task's
classes (labels mapped to 0..K-1), cross-entropy, SGD with momentum and weight decay on the tuned parameters and
the head, cosine decay from ``lr`` to ``min_lr`` over the epochs (stepped once per epoch).
"""
from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.adapters import (CosineHead, add_adapters, attach_adapter_blocks, attach_deep_prompts, attach_ssf,
                               tuning)
from ..toolkit.devices import to_device
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.training import Stage, run_stage
from .base import chosen_blocks
from .hooks import HOOKS


class FrozenAdapterBlocks(NamedTuple):
    """An adapter method's frozen backbone with its adapter-ready blocks (see :func:`frozen_adapter_blocks`)."""
    model: nn.Module  # the frozen token model (``method.frozen_token_model(vit)``)
    layers: List[int]  # indices of the wrapped blocks
    blocks: List[nn.Module]  # the wrapped blocks (:class:`~norga.models.adapters.AdaptedBlock`), one per index
    tuned: nn.ModuleList  # each block's ``tuned`` adapter list (empty until adapters are added; they appear here)


def frozen_adapter_blocks(method, vit: nn.Module, layers: Optional[Sequence[int]]) -> FrozenAdapterBlocks:
    """The frozen backbone of an adapter method: ``method.frozen_token_model(vit)`` freezes every backbone weight
    before any adapter exists, then the blocks ``layers`` (``method.adapter_layers``; None: all) are wrapped as
    :class:`~norga.models.adapters.AdaptedBlock` with no adapter yet."""
    model = method.frozen_token_model(vit)
    chosen = chosen_blocks(vit, layers, "method.adapter_layers")
    blocks = attach_adapter_blocks(model.vit, chosen)
    return FrozenAdapterBlocks(model, chosen, blocks, nn.ModuleList(b.tuned for b in blocks))


def _adapters(vit: nn.Module, layers: Sequence[int], opts, dim: int) -> List[nn.Module]:
    blocks = attach_adapter_blocks(vit, layers)
    add_adapters(blocks, dim, opts.bottleneck, opts.adapter_scale, opts.adapter_dropout)
    return blocks


# tuning name (norga.methods.adapter_config.TUNINGS) -> (vit, blocks, opts, D) -> the wrappers it attached
ATTACH: Dict[str, Callable[..., List[nn.Module]]] = {
    "adapter": _adapters,
    "vpt_deep": lambda vit, layers, opts, dim: attach_deep_prompts(vit, layers, opts.prompt_length),
    "ssf": lambda vit, layers, opts, dim: attach_ssf(vit, layers),
}


def attach_tuning(vit: nn.Module, kind: str, layers: Sequence[int], opts, dim: int) -> nn.ModuleList:
    """Wrap ``vit``'s blocks ``layers`` with tuning ``kind`` (options in ``opts``: bottleneck, adapter_scale,
    adapter_dropout, prompt_length); returns the tuned parameters' modules, one per wrapper (switched on by
    :func:`~norga.models.adapters.tuning` with index 0)."""
    return nn.ModuleList(w.tuned for w in ATTACH[kind](vit, layers, opts, dim))


def freeze(tuned: nn.Module) -> None:
    """No gradients and eval mode (no dropout) for every tuned parameter, for good."""
    for p in tuned.parameters():
        p.requires_grad_(False)
    tuned.eval()


def class_means(feats: Tensor, labels: Tensor, classes: Sequence[int]) -> Tensor:
    """(N, D) features, (N,) labels -> (len(classes), D) the mean feature of each class, in ``classes`` order."""
    means = []
    for c in classes:
        members = feats[labels == c]
        if len(members) == 0:
            raise ValueError(f"class {c} has no training samples")
        means.append(members.mean(0))
    return torch.stack(means)


def local_labels(labels: Tensor, classes: Sequence[int], num_classes: int) -> Tensor:
    """Global labels (B,) -> positions in ``classes`` (B,), on the labels' device; a label outside ``classes``
    fails (RuntimeError on the CPU, a device-side assert on CUDA: a training step never waits for the check)."""
    device = labels.device
    position = torch.full((num_classes,), -1, dtype=torch.long, device=device)
    position[torch.as_tensor(list(classes), device=device)] = torch.arange(len(classes), device=device)
    out = position[labels.long()]
    torch._assert_async((out >= 0).all(), "a training label lies outside the task's classes")
    return out


def train_with_cosine_head(name: str, task: int, features: Callable[[Tensor], Tensor], tuned: List[nn.Parameter],
                           classes: Sequence[int], num_classes: int, loader, opts, dim: int, device,
                           train_modules: Sequence[nn.Module], lr_key: str) -> List[dict]:
    """Train ``tuned`` (and a fresh cosine head) on ``loader``'s (x, y) batches of the task's ``classes``.

    ``features``: images (B, 3, H, W) on the device -> (B, D) tuned features; ``opts`` holds epochs, lr, min_lr,
    momentum, weight_decay. Returns :func:`run_stage`'s per-epoch history. The hook point ``adapter_training``
    (norga/methods/hooks.py) may replace the whole stage; ``head_created`` sees the fresh head.
    """
    replacement = HOOKS.replacement("adapter_training")
    if replacement is not None:
        return replacement(name, task, features, tuned, classes, num_classes, loader, opts, dim, device,
                           train_modules, lr_key)
    head = CosineHead(dim, len(classes))
    HOOKS.notify("head_created", head)  # a declared hook point (norga/methods/hooks.py); no effect by default
    head = head.to(device)
    params = [*tuned, *head.parameters()]
    optimizer = make_optimizer("sgd", params, lr=opts.lr, weight_decay=opts.weight_decay, momentum=opts.momentum)
    scheduler = epoch_scheduler(optimizer, "cosine", opts.epochs, min_lr=opts.min_lr)

    def forward(batch):
        x, y = batch
        return {"logits": head(features(to_device(x, device))),  # pinned on CUDA: the host does not wait
                "labels": to_device(local_labels(y, classes, num_classes), device)}

    return run_stage(Stage(name, task, opts.epochs, optimizer, scheduler, train_modules=[*train_modules, head],
                           lr_key=lr_key),
                     batches=lambda epoch: loader, forward=forward,
                     terms={"ce": lambda out: F.cross_entropy(out["logits"], out["labels"])})


def tune_first_task(name: str, model: nn.Module, tuned: nn.ModuleList, classes: Sequence[int], num_classes: int,
                    loader, opts, device, lr_key: str) -> List[dict]:
    """Train ``tuned`` (tuning 0 of ``model``) with a fresh cosine head on task 0's ``classes`` and ``loader``'s
    augmented (x, y) batches, the frozen backbone in eval mode; then :func:`freeze` it. Returns the epoch history.
    The hook point ``first_task_tuning`` (norga/methods/hooks.py) may replace the whole stage."""
    replacement = HOOKS.replacement("first_task_tuning")
    if replacement is not None:
        return replacement(name, model, tuned, classes, num_classes, loader, opts, device, lr_key)
    params = list(tuned.parameters())
    for p in params:
        p.requires_grad_(True)
    model.eval()  # the frozen backbone stays in eval mode; the tuning modules train
    history = train_with_cosine_head(name, 0, TunedView(model, 0), params, classes, num_classes, loader, opts,
                                     model.embed_dim, device, [tuned], lr_key)
    freeze(tuned)
    return history


class TunedView(nn.Module):
    """``model`` (a PromptedViT whose blocks carry tuning wrappers) run with tuning ``active`` (None: frozen):
    images (B, 3, H, W) -> (B, D); what :func:`~norga.toolkit.stages.extract_features` expects."""

    def __init__(self, model: nn.Module, active):
        super().__init__()
        self.model, self.active, self.embed_dim = model, active, model.embed_dim

    def forward(self, x: Tensor, prompts=None) -> Tensor:
        with tuning(self.model, self.active):
            return self.model(x)


@torch.no_grad()
def cached_features(model: nn.Module, batch, cache, active, device) -> Tensor:
    """Test features (B, D) of ``batch`` under tuning ``active`` (None: frozen), each sample computed once per run
    through ``cache`` (a :class:`~norga.toolkit.feature_cache.FeatureCache`; valid once that tuning is final)."""
    feats, have = cache.slot(batch.task, active, batch.size, model.embed_dim)
    if bool(have[batch.index].all()):
        return feats[batch.index].to(device)
    with tuning(model, active):
        out = model(batch.images).float()
    feats[batch.index], have[batch.index] = out.cpu(), True
    return out.to(device)
