"""Inputs shared by the LoRA cross-checks (InfLoRA, SD-LoRA): real CIFAR-100 images at 56 px, no augmentation.

``test_images``: the first test image of each of classes 0..n-1 (N, 3, 56, 56), as ``norga_inputs.real_batch``;
``task_batches``: ``per_class`` training images of each of task ``task``'s classes (10 task .. 10 task + 9 in the
natural order), bicubic to 56 px with the ImageNet mean / std, in a fixed shuffled order (``RandomState(task)``),
split into fixed batches of ``batch``. Both sides of a cross-check get exactly these tensors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

from crosscheck.harness.norga_inputs import at_56px, real_batch

Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def test_images(shared: Path, n: int = 16) -> torch.Tensor:
    return real_batch(shared, classes=range(n))


def task_batches(shared: Path, task: int, per_class: int = 6, batch: int = 20) -> Batches:
    """Task ``task``'s fixed training batches [(images (batch, 3, 56, 56), labels (batch,) int64)]."""
    data = np.load(shared / "data" / "cifar100.npz")
    classes = range(10 * task, 10 * task + 10)
    pick = np.concatenate([np.where(data["train_y"] == c)[0][:per_class] for c in classes])
    pick = pick[np.random.RandomState(task).permutation(len(pick))]
    x, y = at_56px(data["train_x"][pick]), torch.tensor(data["train_y"][pick], dtype=torch.long)
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x), batch)]


def plain_state(vit) -> Dict[str, torch.Tensor]:
    """The LoRA-wrapped backbone's state dict under timm's own names (the qkv wrappers' ``qkv.qkv`` as ``qkv``, no
    ``branches``), float32."""
    return {k.replace(".qkv.qkv.", ".qkv."): v.float() for k, v in vit.state_dict().items() if ".branches." not in k}
