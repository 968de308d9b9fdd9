"""The shared training loop: optimise parameter groups on batches with named, pluggable loss terms.

Every stage of every method is one :func:`run_stage` call::

    stage = Stage("wtp", task, epochs, optimizer, scheduler, clip=1.0, clip_params=params,
                  train_modules=[model, head], describe=gate_values)
    history = run_stage(stage, batches=lambda epoch: loader, forward=forward,
                        terms={"ce": cross_entropy_term(allowed), "reg": my_regulariser})

``forward(batch)`` returns the step's named tensors (e.g. ``features`` (B, D),
``logits`` (B, C), ``labels`` (B,)); each loss term maps them to a scalar, and
the loss is their sum in the given order. A term is any callable, so a method
adds its own (L2P's surrogate key loss, CODA's orthogonality penalty) without
touching the loop. Every epoch is one line of the run's epoch log (loss, each
term when there are several, lr per parameter group, steps), and a non-finite
loss stops the run naming stage, task and epoch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..errors import NonFiniteLoss
from ..models.precision import grad_scaler
from .distributed import (average_gradients, is_sharded_training, sum_over_processes, synchronise_parameters,
                          world_size)
from .epochlog import log_epoch
from .loss_watch import note_epoch

Outputs = Dict[str, Tensor]
LossTerm = Callable[[Outputs], Tensor]


class EpochMeter:
    """Loss terms of one epoch of one stage: summed per step, reported as means with the lr.

    ``stage`` names the epoch-log lines (``tii``, ``tii_align``, ``wtp``, ``tap``, ``head``
    for HiDe-Prompt; see :mod:`norga.toolkit.epochlog`); ``task`` and ``epoch`` 0-based.
    """

    def __init__(self, stage: str, task: int, epoch: int, lr_key: Optional[str] = None):
        self.stage, self.task, self.epoch, self.lr_key = stage, task, epoch, lr_key
        self.sums: Dict[str, float] = {}
        self.steps = 0
        self.sharded = False  # True once a step averaged gradients over processes (torchrun)

    def step(self, optimizer, loss: Tensor, params: Optional[list] = None, clip: Optional[float] = None,
             scaler: Optional["torch.amp.GradScaler"] = None, samples: Optional[int] = None,
             **terms: Tensor) -> None:
        """One optimiser step on ``loss`` (through ``scaler`` under fp16); ``terms`` (e.g. ce, reg) are logged
        beside it.

        ``samples``: this process's share of a global batch split across processes (torchrun); the gradients
        are then averaged over processes, weighted by samples, before clipping and the step, and the logged
        terms are the global batch's means.

        On CUDA nothing here waits for the device: loss values are summed as device tensors and read once per
        epoch (:meth:`means`); on the CPU the loss is checked at every step, so a divergence stops at once.
        """
        if loss.device.type == "cpu":
            self._check(loss)
        optimizer.zero_grad(set_to_none=True)
        (loss if scaler is None else scaler.scale(loss)).backward()
        weight = 1.0
        if samples is not None:
            weight, self.sharded = average_gradients(_trained(optimizer), samples), True
        if scaler is None:
            if clip is not None and params:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
        else:
            if clip is not None and params:
                scaler.unscale_(optimizer)  # clip the true gradients
                torch.nn.utils.clip_grad_norm_(params, clip)
            scaler.step(optimizer)  # skipped when the scaled gradients overflowed
            scaler.update()
        for name, term in (("loss", loss), *terms.items()):
            self.sums[name] = self.sums.get(name, 0.0) + term.detach().float() * weight
        self.steps += 1

    def _check(self, loss: Tensor) -> None:
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLoss(value, self.stage, self.epoch, self.task, self.lr_key)

    def means(self) -> Dict[str, float]:
        """Per-step means of the epoch's terms (one device sync); a non-finite loss raises NonFiniteLoss."""
        sums = self.sums
        if self.sharded:  # each process summed its weighted share of every global batch's mean
            sums = dict(zip(sums, sum_over_processes(torch.stack([torch.as_tensor(v) for v in sums.values()]))))
        means = {k: float(v) / max(self.steps, 1) for k, v in sums.items()}
        if "loss" in means and not math.isfinite(means["loss"]):
            raise NonFiniteLoss(means["loss"], self.stage, self.epoch, self.task, self.lr_key)
        return means

    def report(self, optimizer, **extra) -> Dict[str, float]:
        """Write the epoch's line to the run's epoch log (a no-op when none is open); returns the means."""
        means = self.means()
        log_epoch(stage=self.stage, task=self.task, epoch=self.epoch, lr=[g["lr"] for g in optimizer.param_groups],
                  steps=self.steps, **means, **extra)
        note_epoch(self.stage, self.epoch, means.get("loss"), self.lr_key)
        return means


@dataclass
class Stage:
    """What one stage optimises and how: ``epochs`` passes of ``optimizer`` (``scheduler.step()`` after each),
    gradient-norm clipping of ``clip_params`` at ``clip``, ``train_modules`` put in train mode at each epoch's
    start, ``describe()`` added to every epoch-log line (e.g. a gate's alpha/tau); ``lr_key`` (e.g.
    ``method.wtp.lr``) is the config key a divergence error tells the user to lower."""

    name: str
    task: int
    epochs: int
    optimizer: torch.optim.Optimizer
    scheduler: Optional[object] = None
    clip: Optional[float] = None
    clip_params: Sequence[Tensor] = ()
    train_modules: Sequence[nn.Module] = ()
    describe: Optional[Callable[[], dict]] = None
    lr_key: Optional[str] = None  # config key of the stage's lr, named when its loss diverges


def run_stage(stage: Stage, batches: Callable[[int], Iterable], forward: Callable[[object], Outputs],
              terms: Dict[str, LossTerm]) -> List[Dict[str, float]]:
    """Train ``stage``; ``batches(epoch)`` yields the epoch's batches, ``forward(batch)`` their named outputs.

    Returns the per-epoch means of ``loss`` (and of every term when there are several).
    """
    if not terms:
        raise ValueError(f"stage {stage.name}: no loss terms")
    history = []
    scaler = grad_scaler(_device_type(stage.optimizer))  # fp16 only: one loss scaler per stage
    for epoch in tqdm(range(stage.epochs), desc=stage.name.upper(), leave=False):
        meter = EpochMeter(stage.name, stage.task, epoch, stage.lr_key)
        for module in stage.train_modules:
            module.train()
        epoch_batches = batches(epoch)
        sharded = is_sharded_training(epoch_batches)  # torchrun: this process holds a slice of each batch
        for batch in epoch_batches:
            train_step(stage, batch, forward, terms, meter, scaler, sharded)
        history.append(meter.report(stage.optimizer, **(stage.describe() if stage.describe else {})))
        if stage.scheduler is not None:
            stage.scheduler.step()
    if world_size() > 1:
        synchronise_parameters(_trained(stage.optimizer), f"stage {stage.name} of task {stage.task}")
    return history


def train_step(stage: Stage, batch, forward: Callable[[object], Outputs], terms: Dict[str, LossTerm],
               meter: EpochMeter, scaler, sharded: bool) -> None:
    """One training step of ``stage`` on ``batch``: forward, loss terms, backward, optimiser step.

    Nothing here waits for the device on CUDA (tests/test_host_syncs.py counts host reads during this call);
    the loss terms are read once per epoch by :meth:`EpochMeter.means`.
    """
    outputs = forward(batch)
    values = {name: term(outputs) for name, term in terms.items()}
    loss = total(values.values())
    meter.step(stage.optimizer, loss, list(stage.clip_params), stage.clip, scaler,
               samples=batch_samples(batch) if sharded else None, **(values if len(values) > 1 else {}))


def batch_samples(batch) -> int:
    """Samples in a loader batch: the length of its first tensor (``(x, y)`` -> len(x))."""
    first = batch
    while isinstance(first, (list, tuple)):
        first = first[0]
    return len(first)


def _trained(optimizer: torch.optim.Optimizer) -> List[Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


def _device_type(optimizer: torch.optim.Optimizer) -> str:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return params[0].device.type if params else "cpu"


def total(values: Iterable[Tensor]) -> Tensor:
    """Sum of loss terms in order (left to right)."""
    values = iter(values)
    result = next(values)
    for value in values:
        result = result + value
    return result


@dataclass(frozen=True)
class AllowedColumns:
    """The allowed classes of a masked cross-entropy as indices: ``index`` (K,) long, the allowed class ids in
    ascending order (the logits' columns to keep); ``position`` (C,) long, class id -> its column among them
    (-1 for a class that is not allowed, which the cross-entropy refuses as out of bounds)."""

    index: Tensor
    position: Tensor


def allowed_columns(allowed: Tensor) -> AllowedColumns:
    """Bool (C,) mask -> :class:`AllowedColumns` on its device (one host sync: compute it once per stage)."""
    index = allowed.nonzero().flatten()
    position = torch.full(allowed.shape, -1, dtype=torch.long, device=allowed.device)
    position[index] = torch.arange(len(index), device=allowed.device)
    return AllowedColumns(index, position)


def cross_entropy_term(allowed: Tensor, label_smoothing: float = 0.0) -> LossTerm:
    """Loss term: masked cross-entropy of ``outputs["logits"]`` against ``outputs["labels"]`` over ``allowed``
    (bool (C,)); the allowed columns are found once, here, so a step never waits for the device."""
    columns = allowed_columns(allowed)
    return lambda out: masked_cross_entropy(out["logits"], out["labels"], columns, label_smoothing)


def masked_cross_entropy(logits: Tensor, labels: Tensor, allowed, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy over the ``allowed`` classes only (bool (C,) or :class:`AllowedColumns`); other logits are
    dropped (selected by index: no host sync with AllowedColumns).

    Equivalent to masking them with -inf, but finite with label smoothing. A label outside the allowed classes
    is a ValueError on the CPU (a device-side assert on CUDA): its column is -1, out of the cross-entropy's bounds.
    The labels of a task's training set are checked once per task (:func:`norga.engine.loaders.check_task_labels`).
    """
    columns = allowed if isinstance(allowed, AllowedColumns) else allowed_columns(allowed)
    try:
        return F.cross_entropy(logits.index_select(1, columns.index), columns.position[labels],
                               label_smoothing=label_smoothing)
    except IndexError as err:  # raised by the CPU kernel's bounds check, before any result
        raise ValueError(f"a label lies outside the allowed classes ({err})") from err


def shuffled_batches(feats: Tensor, labels: Tensor, batch_size: int, generator: torch.Generator,
                     max_batches: Optional[int] = None) -> Iterator[tuple]:
    """(features, labels) batches of a random permutation drawn from ``generator``; at most ``max_batches``."""
    order = torch.randperm(len(labels), generator=generator)
    for i, start in enumerate(range(0, len(order), batch_size)):
        if max_batches is not None and i >= max_batches:
            return
        idx = order[start : start + batch_size]
        yield feats[idx], labels[idx]
