"""Where a run computes: the device from ``device:`` and the data-loader options that suit it."""
from __future__ import annotations

import os

import torch

from ..config import Config, ConfigError
from .distributed import local_device

MAX_AUTO_WORKERS = 8


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:K`` -> a torch.device; a GPU that is not
    there is one ConfigError naming what is. Under torchrun ``cuda``/``auto`` mean this process's GPU
    (``cuda:LOCAL_RANK``)."""
    name = local_device(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device: {name!r} requested but CUDA is not available; use device=cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device: {name!r} requested but this machine has {torch.cuda.device_count()} GPU(s) "
                              f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})")
    return device


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; from pinned memory (a loader's batch on CUDA) the copy does not block the host."""
    return tensor.to(device, non_blocking=True)


def auto_workers(cpus: int) -> int:
    """Loader workers for ``num_workers: auto``: one CPU left to the main process, at most 8."""
    return max(0, min(MAX_AUTO_WORKERS, cpus - 1))


def loader_options(cfg: Config, persistent: bool = True) -> dict:
    """DataLoader keyword arguments: workers (``data.num_workers``, ``auto`` from the CPUs this process may use,
    divided among torchrun's processes on this machine), pinned memory on CUDA (so batches move with
    :func:`to_device` without blocking), workers kept alive across epochs when there are any and ``persistent``
    (a loader kept for the whole run, e.g. a test loader, passes False: its workers end with each pass)."""
    workers = cfg.data.num_workers
    if workers == "auto":  # under torchrun the CPUs are shared by the processes of this machine
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = auto_workers(cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    on_cuda = resolve_device(cfg.device).type == "cuda"
    return dict(num_workers=workers, pin_memory=on_cuda, persistent_workers=persistent and workers > 0)
