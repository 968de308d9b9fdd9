"""The rule of the cross-check's small task (CIFAR-100 classes 0-49, the first 20 training and the first 10 test
images of each class in file order), shared by the cross-checks (``python -m crosscheck.harness.small_task`` writes
it as an .npz) and the GPU check's data preparation (bench/gpu_check_prepare.py).
"""
from __future__ import annotations

from typing import Dict

import numpy as np

CLASSES, PER_CLASS = 50, {"train": 20, "test": 10}


def first_per_class(data: dict, classes: int, per_split: Dict[str, int]) -> dict:
    """The first ``per_split[split]`` images of classes 0..classes-1 in file order (the small task's rule)."""
    out = {}
    for split, n in per_split.items():
        x, y = data[f"{split}_x"], data[f"{split}_y"].astype(np.int64)
        keep = np.sort(np.concatenate([np.flatnonzero(y == c)[:n] for c in range(classes)]))
        out[f"{split}_x"], out[f"{split}_y"] = x[keep], y[keep]
    return out


def small_task(cifar100: dict) -> dict:
    """The small task of ``cifar100`` (a dict of ``{train,test}_{x,y}`` arrays): the same keys, 1000 / 500 images."""
    return first_per_class(cifar100, CLASSES, PER_CLASS)
