"""Raw data sources: each returns uint8 image arrays and integer labels for train and test.

A source is a function ``(root, download, options) -> RawData`` registered in
:data:`SOURCES`; :mod:`norga.data.benchmark` turns it into class-incremental tasks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np


class DataError(FileNotFoundError):
    """Data missing or malformed: the message names the dataset, path, expected layout and source."""


@dataclass
class RawData:
    """Images and labels of a dataset.

    ``*_x``: uint8 arrays (N, H, W, 3) or (N, H, W), or object arrays (N,) whose
    items are image file paths (decoded lazily) or per-image uint8 arrays.
    ``task_groups``: original labels per task when the benchmark fixes its tasks
    (5-Datasets: one dataset per task); ``info``: extra facts for metrics.json.
    """

    train_x: np.ndarray
    train_y: np.ndarray  # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray
    class_names: Optional[List[str]] = None
    task_groups: Optional[List[List[int]]] = None
    info: Dict[str, object] = field(default_factory=dict)


SOURCES: Dict[str, Callable[..., RawData]] = {}


def register_source(name: str):
    def wrap(fn):
        SOURCES[name] = fn
        return fn
    return wrap


@register_source("array")
def array_source(root, download: bool, options: dict) -> RawData:
    """Any .npz with train_x, train_y, test_x, test_y (uint8 NHWC or NHW) and optional classes."""
    path = Path(root) if root else None
    layout = "a .npz file with arrays train_x, train_y, test_x, test_y (uint8 images NHWC or NHW)"
    if path is None or not path.is_file():
        raise DataError(f"array dataset: file not found: {path}; expected {layout} (data.root = its path)")
    with np.load(path, allow_pickle=False) as f:
        missing = [k for k in ("train_x", "train_y", "test_x", "test_y") if k not in f]
        if missing:
            raise DataError(f"array dataset {path}: missing arrays {missing}; expected {layout}")
        data = RawData(f["train_x"], f["train_y"].astype(np.int64), f["test_x"], f["test_y"].astype(np.int64),
                       [str(c) for c in f["classes"]] if "classes" in f else None)
    for split in ("train", "test"):
        x, y = getattr(data, f"{split}_x"), getattr(data, f"{split}_y")
        if x.dtype != np.uint8 or x.ndim not in (3, 4) or len(x) != len(y):
            raise DataError(f"array dataset {path}: {split}_x must be uint8 NHWC/NHW with one label each, "
                            f"got {x.dtype} {x.shape} and {len(y)} labels")
    return data


@register_source("cifar100")
def cifar100_source(root, download: bool, options: dict) -> RawData:
    """CIFAR-100 via torchvision (python pickle layout ``ROOT/cifar-100-python/``)."""
    from torchvision.datasets import CIFAR100

    try:
        train = CIFAR100(str(root), train=True, download=download)
        test = CIFAR100(str(root), train=False, download=download)
    except RuntimeError as err:
        raise DataError(
            f"cifar100: not found or corrupt under {root} ({err}); expected {Path(str(root)) / 'cifar-100-python'}"
            "/{train,test,meta} (torchvision layout); set data.download=true to fetch it from "
            "https://www.cs.toronto.edu/~kriz/cifar.html, or use the 'array' benchmark with a .npz copy"
        ) from err
    return RawData(train.data, np.asarray(train.targets, dtype=np.int64), test.data,
                   np.asarray(test.targets, dtype=np.int64), list(train.classes))


@register_source("synthetic")
def synthetic_source(root, download: bool, options: dict) -> RawData:
    """Seeded procedural images: each class a colour + an oriented low-frequency stripe pattern.

    options: num_classes (30), train_per_class (40), test_per_class (20), size (32),
    noise (0.08), seed (0). Classes are separable even by a random frozen ViT.
    """
    allowed = {"num_classes", "train_per_class", "test_per_class", "size", "noise", "seed"}
    unknown = set(options) - allowed
    if unknown:
        raise DataError(f"synthetic dataset: unknown options {sorted(unknown)}; allowed: {sorted(allowed)}")
    C, size = int(options.get("num_classes", 30)), int(options.get("size", 32))
    rng = np.random.default_rng(int(options.get("seed", 0)))
    colours = rng.uniform(0.15, 0.85, (C, 3))
    angles = rng.uniform(0, np.pi, C)
    freqs = rng.uniform(1.0, 4.0, C)
    yy, xx = np.mgrid[0:size, 0:size] / size

    def make(n_per_class: int):
        xs, ys = [], []
        for c in range(C):
            phase = rng.uniform(0, 2 * np.pi, (n_per_class, 1, 1))
            wave = np.sin(2 * np.pi * freqs[c] * (np.cos(angles[c]) * xx + np.sin(angles[c]) * yy) + phase)
            img = colours[c] + 0.25 * wave[..., None] + rng.normal(0, options.get("noise", 0.08),
                                                                   (n_per_class, size, size, 3))
            xs.append((np.clip(img, 0, 1) * 255).astype(np.uint8))
            ys.append(np.full(n_per_class, c, dtype=np.int64))
        return np.concatenate(xs), np.concatenate(ys)

    train_x, train_y = make(int(options.get("train_per_class", 40)))
    test_x, test_y = make(int(options.get("test_per_class", 20)))
    return RawData(train_x, train_y, test_x, test_y, [f"class_{c}" for c in range(C)])
