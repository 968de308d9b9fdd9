"""Class-incremental benchmarks: class order, task split, label remapping, per-task datasets.

Labels are remapped so that label = position in ``class_order``; task t owns
the contiguous range of remapped labels ``task_classes[t]``.
"""
from __future__ import annotations

import random
from typing import List, Optional, Sequence, Union

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from . import derived_sources, five_datasets, folders, ptm_folders  # noqa: F401  (register their sources)
from .sources import SOURCES, DataError, RawData
from .transforms import build_transforms, task_recipes

BENCHMARKS = SOURCES  # registry: name -> source function


class ArrayImageDataset(Dataset):
    """Images (uint8 (N, H, W[, 3]), or object array of per-image arrays / file paths) + labels
    -> (transformed RGB image tensor, label)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        item = self.images[i]
        if isinstance(item, str):
            try:
                with Image.open(item) as f:
                    img = f.convert("RGB")
            except (OSError, ValueError) as err:  # truncated or not an image: name the file, not PIL's internals
                raise DataError(f"cannot read image {item} ({type(err).__name__}: {err}); replace or delete "
                                "the file, then re-run the same command to resume ('norga train --dry-run' "
                                "lists every unreadable file at once)") from err
        else:
            img = Image.fromarray(item).convert("RGB")  # grayscale -> 3 channels
        return self.transform(img), int(self.labels[i])


def seeded_shuffle(n: int, seed: int, rng: str = "python") -> List[int]:
    """A seeded permutation of 0..n-1.

    ``python``: ``random.seed(seed); random.shuffle(list(range(n)))`` — the
    authors' code (seed 42, n = 100 starts 42, 41, 91, 9, 65); a private
    ``random.Random`` gives the same numbers without touching the global state.
    ``numpy``: ``np.random.RandomState(seed).permutation(n)`` (norga <= 0.1).
    """
    if rng == "python":
        order = list(range(n))
        random.Random(seed).shuffle(order)
        return order
    if rng == "numpy":
        return np.random.RandomState(seed).permutation(n).tolist()
    raise DataError(f"data.class_order_rng must be 'python' or 'numpy', got {rng!r}")


def resolve_class_order(order: Union[str, Sequence[int]], num_classes: int, seed: int,
                        rng: str = "python") -> List[int]:
    if isinstance(order, str):
        if order == "natural":
            return list(range(num_classes))
        if order == "seed":
            return seeded_shuffle(num_classes, seed, rng)
        raise DataError(f"class_order must be 'seed', 'natural' or a list of class ids, got {order!r}")
    order = [int(c) for c in order]
    if sorted(order) != list(range(num_classes)):
        raise DataError(f"explicit class_order must be a permutation of 0..{num_classes - 1}")
    return order


def grouped_class_order(order: Union[str, Sequence[int]], groups: List[List[int]], seed: int,
                        rng: str = "python") -> List[int]:
    """Class order for benchmarks with fixed tasks (5-Datasets): classes never leave their group.

    'natural' keeps the groups in order. 'seed' with ``rng='python'`` shuffles the
    **order of the groups** (tasks) with Python's random, classes in natural
    order within each (the authors' ``random.shuffle(dataset_list)``); with
    ``rng='numpy'`` the groups stay in order and classes are permuted within
    each (norga <= 0.1). An explicit list must list each group's classes
    contiguously, groups in order.
    """
    if order == "natural":
        return [c for g in groups for c in g]
    if order == "seed" and rng == "python":
        return [c for k in seeded_shuffle(len(groups), seed, rng) for c in groups[k]]
    if order == "seed":
        state = np.random.RandomState(seed)
        return [int(c) for g in groups for c in state.permutation(g)]
    if isinstance(order, str):
        raise DataError(f"class_order must be 'seed', 'natural' or a list of class ids, got {order!r}")
    order, start = [int(c) for c in order], 0
    for t, g in enumerate(groups):
        if sorted(order[start:start + len(g)]) != sorted(g):
            raise DataError(f"explicit class_order: positions {start}-{start + len(g) - 1} must be the classes "
                            f"of fixed task {t} ({sorted(g)}) in any order")
        start += len(g)
    if start != len(order):
        raise DataError(f"explicit class_order has {len(order)} entries, the benchmark has {start} classes")
    return order


def fixed_tasks(groups: List[List[int]], num_tasks: int, classes_per_task: Optional[int],
                first_task_classes: Optional[int]) -> List[List[int]]:
    """Remapped class ids per task for a benchmark whose tasks are fixed (one group each)."""
    sizes = [len(g) for g in groups]
    if num_tasks != len(groups) or first_task_classes is not None or (
            classes_per_task is not None and any(s != classes_per_task for s in sizes)):
        raise DataError(f"this benchmark has {len(groups)} fixed tasks of {sizes} classes; set data.num_tasks="
                        f"{len(groups)}, leave classes_per_task unset (or {sizes[0]}) and first_task_classes unset")
    bounds = np.cumsum([0] + sizes)
    return [list(range(bounds[t], bounds[t + 1])) for t in range(len(groups))]


def split_tasks(num_classes: int, num_tasks: int, classes_per_task: Optional[int],
                first_task_classes: Optional[int]) -> List[List[int]]:
    """Remapped class ids per task, e.g. 100 classes / 10 tasks -> [[0..9], [10..19], ...]."""
    first = first_task_classes
    if first is None:
        per = classes_per_task or num_classes // num_tasks
        if per * num_tasks != num_classes:
            fix = (f"data.num_tasks x data.classes_per_task must equal {num_classes}" if classes_per_task else
                   f"choose data.num_tasks dividing {num_classes}, or set data.first_task_classes")
            raise DataError(f"{num_classes} classes cannot be split into {num_tasks} tasks of "
                            f"{classes_per_task or num_classes / num_tasks} classes; {fix}")
        sizes = [per] * num_tasks
    else:
        rest = num_classes - first
        if num_tasks < 2 or rest % (num_tasks - 1):
            raise DataError(f"after a first task of {first} classes, {rest} classes do not split evenly "
                            f"into {num_tasks - 1} tasks")
        sizes = [first] + [rest // (num_tasks - 1)] * (num_tasks - 1)
    bounds = np.cumsum([0] + sizes)
    return [list(range(bounds[t], bounds[t + 1])) for t in range(num_tasks)]


class Benchmark:
    """Tasks of a class-incremental benchmark built from raw arrays."""

    def __init__(self, name: str, raw: RawData, task_classes, class_order, image_size, mean, std, info,
                 transforms: str = "backbone"):
        self.name, self.raw, self.task_classes, self.class_order = name, raw, task_classes, class_order
        self.num_tasks = len(task_classes)
        self.num_classes = sum(len(c) for c in task_classes)
        remap = np.empty(len(class_order), dtype=np.int64)
        remap[np.asarray(class_order)] = np.arange(len(class_order))
        self._train_y, self._test_y = remap[raw.train_y], remap[raw.test_y]
        names = raw.class_names
        self.class_names = [names[c] for c in class_order] if names else None
        self.recipes = task_recipes(transforms, name, self._task_components(raw))
        built = {r: (build_transforms(image_size, mean, std, True, r),
                     build_transforms(image_size, mean, std, False, r))
                 for r in set(self.recipes)}
        self._tfs = [built[r] for r in self.recipes]  # (train, test) transform per task
        self._info = {**info, "transforms": transforms, "task_recipes": list(self.recipes)}

    def _task_components(self, raw: RawData) -> List[str]:
        """Source dataset name of each task (5-Datasets) or "" (split benchmarks)."""
        if not raw.task_groups:
            return ["" for _ in self.task_classes]
        names = raw.info.get("datasets") or [""] * len(raw.task_groups)
        group_of = {c: g for g, members in enumerate(raw.task_groups) for c in members}
        return [names[group_of[self.class_order[classes[0]]]] for classes in self.task_classes]

    def _subset(self, images, labels, task: int, train_transform: bool):
        if not 0 <= task < self.num_tasks:
            raise IndexError(f"task {task} out of range for {self.num_tasks} tasks")
        idx = np.flatnonzero(np.isin(labels, self.task_classes[task]))
        return ArrayImageDataset(images[idx], labels[idx], self._tfs[task][0 if train_transform else 1])

    def train_set(self, task: int, train_transform: bool = True) -> Dataset:
        """Training images of ``task``; ``train_transform=False`` gives the test transform (statistics)."""
        return self._subset(self.raw.train_x, self._train_y, task, train_transform)

    def test_set(self, task: int) -> Dataset:
        return self._subset(self.raw.test_x, self._test_y, task, False)

    def summary(self) -> str:
        recipes = sorted(set(self.recipes))
        per_task = f" (per task: {list(self.recipes)})" if len(recipes) > 1 else ""
        lines = [f"{self.name}: {self.num_classes} classes in {self.num_tasks} tasks; transforms "
                 f"{self._info['transforms']} -> {', '.join(recipes)}{per_task}"]
        for t, classes in enumerate(self.task_classes):
            n_train = int(np.isin(self._train_y, classes).sum())
            n_test = int(np.isin(self._test_y, classes).sum())
            shown = [self.class_names[c] if self.class_names else self.class_order[c] for c in classes]
            lines.append(f"  task {t}: {len(classes)} classes, {n_train} train / {n_test} test: {shown}")
        return "\n".join(lines)

    def info(self) -> dict:
        return {"name": self.name, "num_classes": self.num_classes, "class_order": self.class_order,
                "task_sizes": [len(c) for c in self.task_classes], **self._info}


def _per_class_subsample(x, y, n: Optional[int], seed: int):
    if n is None:
        return x, y
    rng = np.random.RandomState(seed)
    keep = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:n] for c in np.unique(y)])
    keep.sort()
    return x[keep], y[keep]


def build_benchmark(name: str, root, num_tasks: int, classes_per_task: Optional[int] = None,
                    first_task_classes: Optional[int] = None, class_order: Union[str, Sequence[int]] = "seed",
                    seed: int = 0, image_size: int = 224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                    download: bool = False, train_per_class: Optional[int] = None,
                    test_per_class: Optional[int] = None, options: Optional[dict] = None,
                    class_order_rng: str = "python", transforms: str = "backbone") -> Benchmark:
    """Read (and check) the data now, before any training; raises DataError with the fix.

    ``class_order_rng`` and ``transforms``: see :func:`seeded_shuffle` and :mod:`norga.data.transforms`.
    """
    if name not in SOURCES:
        raise DataError(f"unknown benchmark {name!r}; registered: {sorted(SOURCES)}")
    raw = SOURCES[name](root, download, dict(options or {}))
    raw.train_x, raw.train_y = _per_class_subsample(raw.train_x, raw.train_y, train_per_class, seed)
    raw.test_x, raw.test_y = _per_class_subsample(raw.test_x, raw.test_y, test_per_class, seed + 1)
    num_classes = int(max(raw.train_y.max(), raw.test_y.max())) + 1
    for split, labels in (("training", raw.train_y), ("test", raw.test_y)):  # a class absent from a split
        missing = sorted(set(range(num_classes)) - set(np.unique(labels).tolist()))  # would shrink its task
        if missing:
            raise DataError(f"{name} under {root}: classes {missing[:10]} have no {split} images")
    if raw.task_groups:
        order = grouped_class_order(class_order, raw.task_groups, seed, class_order_rng)
        tasks = fixed_tasks(raw.task_groups, num_tasks, classes_per_task, first_task_classes)
    else:
        order = resolve_class_order(class_order, num_classes, seed, class_order_rng)
        tasks = split_tasks(num_classes, num_tasks, classes_per_task, first_task_classes)
    info = {"train_per_class": train_per_class, "test_per_class": test_per_class,
            "num_train": int(len(raw.train_y)), "num_test": int(len(raw.test_y)), **raw.info}
    return Benchmark(name, raw, tasks, order, image_size, mean, std, info, transforms)


