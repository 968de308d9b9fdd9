"""What the norga sides of the RanPAC, APER and EASE cross-checks share (``crosscheck/{ranpac,aper,ease}/
norga_side.py``): real CIFAR-100 images at 56 px, the backbone's plain timm state dict, adapters moved away from
their zero-output start (the forward checks skip training), and a recorder of the cosine heads the training stage
creates (their initial values, and one reset of the global random stream right after each head is drawn so that
both sides draw the same adapter-dropout masks).

Task layout: 5 tasks x 10 classes in natural order (``norga_inputs.TASKS``), so a class's norga index is its
reference index and task 0's local labels are its global ones.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from crosscheck.harness.norga_cli import WEIGHTS
from crosscheck.harness.norga_inputs import TASKS, at_56px, method_of
from norga.methods.adapter_stage import freeze
from norga.methods.base import TaskLoaders
from norga.methods.hooks import HOOKS

DROPOUT_SEED = 1234  # the global stream both sides restart from right after a training head is drawn


def images(shared: Path, split: str, index: np.ndarray) -> Tensor:
    """CIFAR-100 ``split`` images at ``index``, bicubic to 56 px, ImageNet mean/std: (N, 3, 56, 56) (norga_side's
    preprocessing)."""
    data = np.load(shared / "data" / "cifar100.npz")
    return at_56px(data[f"{split}_x"][index])


def first_of_classes(shared: Path, split: str, classes: Sequence[int], per_class: int) -> Tuple[Tensor, Tensor]:
    """The first ``per_class`` images of each of ``classes`` in file order, grouped by class: (x, y)."""
    labels = np.load(shared / "data" / "cifar100.npz")[f"{split}_y"]
    pick = np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in classes])
    return images(shared, split, pick), torch.tensor(labels[pick], dtype=torch.long)


def test_images(shared: Path) -> Tuple[Tensor, Tensor]:
    """The first test image of classes 0, 3, ..., 48: 17 images of 17 classes from all 5 tasks."""
    return first_of_classes(shared, "test", range(0, 50, 3), 1)


def task_data(shared: Path, per_class: int) -> List[Tuple[Tensor, Tensor]]:
    """Each task's first ``per_class`` training images per class: [(x, y)] * 5."""
    return [first_of_classes(shared, "train", classes, per_class) for classes in TASKS]


def three_batches(shared: Path, classes: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """Six training images of each of ``classes`` (10 classes: 60 images) in one fixed shuffle: three batches of 20."""
    x, y = first_of_classes(shared, "train", classes, 6)
    order = np.random.RandomState(0).permutation(len(y))
    return x[order], y[order]


def batches(x: Tensor, y: Tensor, size: int = 20) -> List[Tuple[Tensor, Tensor]]:
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(y), size)]


def plain_loaders(x: Tensor, y: Tensor) -> TaskLoaders:
    """A task's loaders for the forward checks: no augmented loader (nothing is trained), the un-augmented one."""
    return TaskLoaders(None, batches(x, y), None)


def backbone_state(vit: nn.Module) -> Dict[str, Tensor]:
    """The timm state dict of ``vit`` without tuning wrappers (``blocks.i.block.x`` -> ``blocks.i.x``, no
    ``tuned``)."""
    return {k.replace(".block.", "."): v.detach().float().clone() for k, v in vit.state_dict().items()
            if ".tuned." not in k}


@torch.no_grad()
def move_away(params: Sequence[nn.Parameter], generator: torch.Generator) -> None:
    """Give freshly initialised adapter tensors values as after training: weights +- N(0, 0.05^2) added, biases
    N(0, 0.02^2) (a fresh adapter's up-projection is zero, so its output would be zero)."""
    for p in params:
        p += torch.randn(p.shape, generator=generator) * (0.05 if p.dim() > 1 else 0.02)


def state_of(module: nn.Module) -> Dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


class HeadRecorder:
    """Within ``with``: every cosine head the training stage creates is kept (``heads``) with its initial values
    (``initial``), and the global random stream restarts at :data:`DROPOUT_SEED` right after it is drawn (through
    the declared hook point ``head_created`` of :mod:`norga.methods.hooks`)."""

    def __init__(self):
        self.heads: List[nn.Module] = []
        self.initial: List[Dict[str, Tensor]] = []
        self._observing = HOOKS.observed("head_created", self.record)

    def record(self, head: nn.Module) -> None:
        self.heads.append(head)
        self.initial.append(state_of(head))
        torch.manual_seed(DROPOUT_SEED)

    def __enter__(self):
        self._observing.__enter__()
        return self

    def __exit__(self, *exc):
        return self._observing.__exit__(*exc)


def build(config: str, overrides: Sequence[str], shared: Path):
    """(vit, method) of ``configs/<config>`` as ViT-S/14 at 56 px on the 5 x 10 task split."""
    return method_of(config, list(overrides), shared / WEIGHTS)


def moved_instead_of_trained(generator: torch.Generator):
    """Within ``with``: the first-session tuning of APER and RanPAC (the hook point ``first_task_tuning`` of
    :mod:`norga.methods.hooks`) moves the new adapters away from their zero-output start (:func:`move_away` with
    ``generator``) and freezes them instead of training."""
    def instead_of_training(name, model, tuned, *args, **kwargs):
        move_away(list(tuned.parameters()), generator)
        freeze(tuned)

    return HOOKS.replaced("first_task_tuning", instead_of_training)


def sgd_opts(c) -> Dict[str, float]:
    """The SGD values the reference side trains with, from a training section of a config (``method`` or RanPAC's
    ``method.first_session``): lr, weight decay, final lr of the cosine, adapter dropout probability."""
    return {"lr": c.lr, "weight_decay": c.weight_decay, "min_lr": c.min_lr, "dropout": c.adapter_dropout}


def first_task_steps(method, shared: Path, c) -> dict:
    """``method.learn_task(0)`` on :func:`three_batches` of task 0 (both loaders: the same 3 batches of 20):
    images (60, 3, 56, 56), labels (60,), the adapters and cosine head before and after, the dropout seed and
    :func:`sgd_opts` of the training section ``c``."""
    x, y = three_batches(shared, TASKS[0])
    initial = state_of(method.tuned)
    with HeadRecorder() as heads:
        method.learn_task(0, TaskLoaders(batches(x, y), batches(x, y), None))
    return {"images": x, "labels": y, "initial": initial, "trained": state_of(method.tuned),
            "initial_head": heads.initial[0], "trained_head": state_of(heads.heads[0]), "dropout_seed": DROPOUT_SEED,
            "opts": sgd_opts(c)}
