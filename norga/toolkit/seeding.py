"""Seeds that depend only on (seed, task, stage), so interrupted and resumed runs stay identical.

Every task reseeds the global generators from (seed, task) and every shuffling
stage draws from its own generator, so nothing about the random state has to be
saved in a checkpoint: resuming after task k replays exactly what an
uninterrupted run does from task k + 1 on.

Two families of streams. ``task_seed`` / ``task_generator`` are numbered
(seed · 1000003 + task, + 101 · task + stage): the engine's global seeds and
loader shuffles and HiDe-Prompt's stages use them, and numbered streams can
coincide (``task_generator(s, 0, k) == task_seed(s, k)``: task 0's loader
shuffle starts from task 0's global seed). They are kept because HiDe-Prompt's
proven numbers (docs/fidelity.md) are drawn from them. ``named_generator`` gives
a stream of its own to anything else (a method's initialisation, a projection):
it never coincides with a numbered stream or with another name, so the values a
method starts from are independent of the data order and the augmentation.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def task_generator(seed: int, task: int, stage: int) -> torch.Generator:
    """A generator that depends only on (seed, task, stage): resumable runs stay identical."""
    return torch.Generator().manual_seed(seed * 1_000_003 + task * 101 + stage)


NAMED_STREAM_BIT = 1 << 63  # set in every named stream's seed, clear in every numbered one (seeds < 2**43)


def named_generator(seed: int, task: int, name: str) -> torch.Generator:
    """The generator of the stream ``name`` (e.g. ``"l2p.init"``) of task ``task`` of a run seeded ``seed``.

    Its 64-bit seed is NumPy's SeedSequence over (seed, task, the bytes of ``name``) with bit 63 set: two
    names give unrelated streams, and none equals a numbered stream (``task_seed``, ``task_generator``), whose
    seeds stay below 2**63 for run seeds below 2**43."""
    if seed < 0 or task < 0 or not name:
        raise ValueError(f"named_generator needs seed >= 0, task >= 0 and a name; got {seed}, {task}, {name!r}")
    state = np.random.SeedSequence([seed, task, *name.encode()]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state) | NAMED_STREAM_BIT)


def task_seed(seed: int, task: int) -> int:
    """The global seed of task ``task`` of a run seeded ``seed`` (the engine reseeds before every task)."""
    return seed * 1_000_003 + task


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
