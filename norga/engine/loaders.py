"""The data loaders of one task: augmented training batches, un-augmented training images, the test set.

In one process they are plain DataLoaders (training shuffled by a (seed, task)
generator). Under torchrun (:mod:`norga.toolkit.distributed`) each process gets its
slice of every global training batch (``batch_size`` stays the global batch) and a
contiguous part of the un-augmented and test sets (``eval_batch_size`` is per process);
feature extraction and evaluation gather the parts.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from torch.utils.data import DataLoader

from ..config import Config
from ..methods.base import TaskLoaders
from ..toolkit.devices import loader_options
from ..toolkit.distributed import ContiguousShard, ShardedBatchSampler, rank, world_size
from ..toolkit.seeding import task_generator


def task_loaders(cfg: Config, bench, task: int, train_batch_size: int,
                 test: Optional[DataLoader] = None) -> TaskLoaders:
    """Augmented train (shuffled by a (seed, task) generator), un-augmented train and test loaders of ``task``
    (``test``: an existing test loader of that task to reuse)."""
    train_set, generator = bench.train_set(task), task_generator(cfg.seed, task, 0)
    if world_size() > 1:
        sampler = ShardedBatchSampler(len(train_set), train_batch_size, world_size(), rank(), generator)
        train = DataLoader(train_set, batch_sampler=sampler, generator=generator, **loader_options(cfg))
    else:
        train = DataLoader(train_set, batch_size=train_batch_size, shuffle=True, drop_last=False,
                           generator=generator, **loader_options(cfg))
    check_task_labels(train_set, getattr(bench, "task_classes", None), task)
    plain = ordered_loader(cfg, bench.train_set(task, train_transform=False))
    return TaskLoaders(train, plain, test if test is not None else test_loader(cfg, bench, task))


def test_loader(cfg: Config, bench, task: int) -> DataLoader:
    """The test loader of ``task``: kept for the whole run by the evaluator, so its workers (if any) end with each
    pass instead of idling between evaluations."""
    return ordered_loader(cfg, bench.test_set(task), persistent=False)


def ordered_loader(cfg: Config, dataset, persistent: bool = True) -> DataLoader:
    """``dataset`` in order, ``eval_batch_size`` per batch; under torchrun this process's contiguous part."""
    sampler = ContiguousShard(len(dataset), world_size(), rank()) if world_size() > 1 else None
    return DataLoader(dataset, batch_size=cfg.eval_batch_size, sampler=sampler, **loader_options(cfg, persistent))


def check_task_labels(dataset, task_classes, task: int) -> None:
    """The training labels of ``task`` lie among its classes (``task_classes[task]``): checked once per task on
    the host, so the cross-entropy of a training step need not read them. A dataset that does not expose its
    ``labels`` is not checked."""
    labels = getattr(dataset, "labels", None)
    if labels is None or task_classes is None:
        return
    outside = sorted(set(np.unique(np.asarray(labels)).tolist()) - {int(c) for c in task_classes[task]})
    if outside:
        raise ValueError(f"task {task}: training labels {outside[:5]} lie outside the task's classes")


def close_loaders(loaders: TaskLoaders) -> None:
    """End the persistent workers of a task's training loaders once the task is learned (its test loader is
    the evaluator's and keeps no workers between passes); a later pass would start new ones."""
    for loader in (loaders.train, loaders.train_plain):
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        if iterator is not None:
            loader._iterator = None
