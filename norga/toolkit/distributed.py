"""Data parallelism under ``torchrun``: the same code path as one process, with the data split across processes.

``torchrun --nproc_per_node=N train.py ...`` starts N processes (env ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK``); :func:`distributed_session` joins them into a process group
(``nccl`` on CUDA, ``gloo`` on the CPU). Without torchrun everything here is a no-op.

* Training: :class:`ShardedBatchSampler` draws one permutation per epoch from the
  task's generator (the same on every process, and the same permutation a single
  process draws), cuts it into global batches of ``batch_size`` and gives each
  process its slice of every global batch. ``batch_size`` is therefore the global
  batch, and the lr scaling the configs state stays valid.
* Gradients: :func:`average_gradients` after every backward, weighted by each
  process's samples in the step, so a step's gradient is the gradient of the mean
  loss over the global batch. We all-reduce explicitly instead of wrapping modules
  in ``DistributedDataParallel``: what a method trains is a handful of tensors
  spread over prompts, gates, keys and heads (not one module), it changes from task
  to task, prompts not selected by any sample of a shard get no gradient there
  (DDP would need ``find_unused_parameters`` and a re-wrap per stage), and some
  stages train on data that is already identical on every process (Gaussian
  pseudo-features), where averaging must not happen at all. The trained tensors
  are small (at most a few million values against the backbone's 86 M), so one
  flat all-reduce per step costs little beside the forward through the ViT.
* Features and evaluation: :class:`ContiguousShard` gives each process a
  contiguous part of an un-shuffled dataset; :func:`gather_rows` puts the parts
  back together in dataset order, with no sample twice (no sampler padding), so
  Gaussian statistics are computed from every sample exactly once, identically on
  every process; evaluation counts are summed over processes.
* Only rank 0 writes run files (:func:`is_main`).
"""
from __future__ import annotations

import contextlib
import datetime
import os
from typing import Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import Sampler

from ..errors import NorgaError

TIMEOUT_MINUTES = 30  # a process waiting longer than this for the others stops with an error (never hangs)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    """True in the process that writes run files and prints: rank 0, or the only process (also before and
    after the process group exists, from torchrun's ``RANK``)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def local_device(name: str) -> str:
    """The device string of this process: under torchrun, ``cuda``/``auto`` become ``cuda:LOCAL_RANK``."""
    if not launched_by_torchrun():
        return name
    if name.startswith("cuda:"):
        raise NorgaError(f"device: {name!r} under torchrun: each process takes the GPU of its LOCAL_RANK; write "
                         "device: cuda (choose the GPUs with CUDA_VISIBLE_DEVICES)")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return name


@contextlib.contextmanager
def distributed_session(device: str) -> Iterator[None]:
    """Join torchrun's processes for the block (``nccl`` for CUDA devices, else ``gloo``); a no-op otherwise."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield
        return
    on_cuda = local_device(device).startswith("cuda")
    if on_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_cuda else "gloo", timeout=datetime.timedelta(minutes=TIMEOUT_MINUTES))
    try:
        yield
    finally:
        dist.destroy_process_group()


class ShardedBatchSampler(Sampler):
    """This process's slice of every global batch of a per-epoch permutation (a batch sampler).

    Each ``iter()`` (one epoch) draws a permutation from ``generator`` as torch's
    shuffling sampler does (``randperm(n)``, then the empty remainder permutation it
    also draws), cuts it into global batches of ``batch_size`` and yields slice ``rank``
    of each (``torch.tensor_split`` into ``world`` parts: sizes differ by at most one).
    Given to a DataLoader with ``generator=generator`` too (which draws its workers' base
    seed from it first, as in one process), the global batches are exactly the batches
    of the single-process DataLoader(shuffle=True, generator=...) of the same seed.
    A last global batch smaller than ``world`` is merged into the one before it, so every
    process has at least one sample in every step and no sample is dropped or repeated.
    """

    def __init__(self, n: int, batch_size: int, world: int, rank: int, generator: torch.Generator):
        if n < world:
            raise NorgaError(f"a training set of {n} samples cannot be split over {world} processes; "
                             "use fewer processes (torchrun --nproc_per_node)")
        if batch_size < world:
            raise NorgaError(f"batch size {batch_size} is smaller than the {world} processes; batch sizes are "
                             "global (split across processes): raise it or use fewer processes")
        self.n, self.batch_size, self.world, self.rank, self.generator = n, batch_size, world, rank, generator

    def global_batches(self) -> List[Tensor]:
        """One epoch's global batches (advances the generator by one permutation)."""
        order = torch.randperm(self.n, generator=self.generator)
        torch.randperm(self.n, generator=self.generator)  # RandomSampler's draw for num_samples % n (empty)
        batches = list(order.split(self.batch_size))
        if len(batches) > 1 and len(batches[-1]) < self.world:
            batches[-2:] = [torch.cat(batches[-2:])]
        return batches

    def __iter__(self) -> Iterator[List[int]]:
        for batch in self.global_batches():
            yield torch.tensor_split(batch, self.world)[self.rank].tolist()

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full + (1 if rest >= self.world or full == 0 else 0)


class ContiguousShard(Sampler):
    """Indices ``start .. stop-1`` of a dataset of ``n``: part ``rank`` of ``world`` near-equal contiguous parts."""

    def __init__(self, n: int, world: int, rank: int):
        self.n, self.world = n, world
        self.start, self.stop = n * rank // world, n * (rank + 1) // world

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.stop - self.start

    def part_sizes(self) -> List[int]:
        return [self.n * (r + 1) // self.world - self.n * r // self.world for r in range(self.world)]


def shard_of(loader) -> Optional[ContiguousShard]:
    """The loader's :class:`ContiguousShard` (None for a loader over the whole dataset)."""
    sampler = getattr(loader, "sampler", None)
    return sampler if isinstance(sampler, ContiguousShard) else None


def is_sharded_training(batches) -> bool:
    """Whether an epoch's batches come from a :class:`ShardedBatchSampler` (so gradients must be averaged)."""
    return isinstance(getattr(batches, "batch_sampler", None), ShardedBatchSampler)


def _wire(tensor: Tensor) -> Tensor:
    """``tensor`` where the backend can send it: the process's GPU under nccl, else where it is."""
    if dist.get_backend() == "nccl" and tensor.device.type != "cuda":
        return tensor.to(torch.device("cuda", torch.cuda.current_device()))
    return tensor


def gather_rows(part: Tensor, sizes: Sequence[int]) -> Tensor:
    """Every process's ``part`` (sizes[r], ...) concatenated in rank order, on every process, on part's device."""
    if world_size() == 1:
        return part
    padded = _wire(part.new_zeros((max(sizes), *part.shape[1:])))
    padded[: len(part)] = part
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:s] for p, s in zip(parts, sizes)]).to(part.device)


def sum_over_processes(values: Tensor) -> Tensor:
    """``values`` summed over all processes (a copy, on values' device)."""
    if world_size() == 1:
        return values.clone()
    total = _wire(values.clone())
    dist.all_reduce(total)
    return total.to(values.device)


def average_gradients(params: Sequence[Tensor], samples: int):
    """Set each parameter's gradient to the sample-weighted mean over processes; returns this process's weight
    samples / global samples (a 0-dim tensor; 1.0 in one process).

    A process's gradient is that of its mean loss over its ``samples``; the result is
    sum_r samples_r * grad_r / sum_r samples_r, the gradient of the mean over the
    global batch. A parameter that got no gradient on any process keeps ``None``
    (so optimisers skip it, as in one process); on some processes only, the others count zeros. Knowing which
    parameters got one is the step's only host-device synchronisation.
    """
    params = [p for p in params if p.requires_grad]
    if world_size() == 1 or not params:
        return 1.0
    device = params[0].device
    flat = torch.cat([(p.grad.detach().float().flatten() * samples) if p.grad is not None
                      else torch.zeros(p.numel(), device=device) for p in params]
                     + [torch.tensor([float(p.grad is not None) for p in params] + [float(samples)], device=device)])
    dist.all_reduce(flat)
    total, has_grad = flat[-1], flat[-1 - len(params):-1]
    offset = 0
    for p, got in zip(params, has_grad.tolist()):
        values = flat[offset: offset + p.numel()].view_as(p) / total
        offset += p.numel()
        p.grad = values.to(p.dtype) if got > 0 else None
    return samples / total


def synchronise_parameters(params: Sequence[Tensor], what: str, tolerance: float = 1e-4) -> None:
    """Give every process rank 0's copy of ``params``; raise when the copies differed beyond ``tolerance``.

    Called after each training stage. Stages on sharded data average their gradients and stay
    bitwise equal; stages on data that is identical everywhere (gathered features, Gaussian
    pseudo-features) are computed identically, up to non-deterministic GPU kernels (atomic
    adds), whose last-bit differences this removes. A larger difference (relative to the
    largest value) means a stage trained on split batches without averaging: an error.
    """
    if world_size() == 1 or not params:
        return
    mine = _wire(torch.cat([p.detach().float().flatten() for p in params]))
    reference = mine.clone()
    dist.broadcast(reference, src=0)
    gap = (mine - reference).abs().max() / (1.0 + reference.abs().max())
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    if float(gap) > tolerance:
        raise NorgaError(f"{what}: the processes' parameters differ after the stage (relative gap {float(gap):.2e}); "
                         "its batches were split across processes but its gradients were not averaged (a norga "
                         "bug; please report it)")
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(reference[offset: offset + p.numel()].view_as(p))
            offset += p.numel()
