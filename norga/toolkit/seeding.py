"""Seeds that depend only on (seed, task, stage), so interrupted and resumed runs stay identical.

Every task reseeds the global generators from (seed, task) and every shuffling
stage draws from its own generator, so nothing about the random state has to be
saved in a checkpoint: resuming after task k replays exactly what an
uninterrupted run does from task k + 1 on.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def task_generator(seed: int, task: int, stage: int) -> torch.Generator:
    """A generator that depends only on (seed, task, stage): resumable runs stay identical."""
    return torch.Generator().manual_seed(seed * 1_000_003 + task * 101 + stage)


def task_seed(seed: int, task: int) -> int:
    """The global seed of task ``task`` of a run seeded ``seed`` (the engine reseeds before every task)."""
    return seed * 1_000_003 + task


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
