"""The data loaders of one task: augmented training batches, un-augmented training images, the test set.

In one process they are plain DataLoaders (training shuffled by a (seed, task)
generator). Under torchrun (:mod:`norga.toolkit.distributed`) each process gets its
slice of every global training batch (``batch_size`` stays the global batch) and a
contiguous part of the un-augmented and test sets (``eval_batch_size`` is per process);
feature extraction and evaluation gather the parts.
"""
from __future__ import annotations

from typing import Optional

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
    plain = ordered_loader(cfg, bench.train_set(task, train_transform=False))
    return TaskLoaders(train, plain, test if test is not None else test_loader(cfg, bench, task))


def test_loader(cfg: Config, bench, task: int) -> DataLoader:
    return ordered_loader(cfg, bench.test_set(task))


def ordered_loader(cfg: Config, dataset) -> DataLoader:
    """``dataset`` in order, ``eval_batch_size`` per batch; under torchrun this process's contiguous part."""
    sampler = ContiguousShard(len(dataset), world_size(), rank()) if world_size() > 1 else None
    return DataLoader(dataset, batch_size=cfg.eval_batch_size, sampler=sampler, **loader_options(cfg))
