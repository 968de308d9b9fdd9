"""MOS's formulas on plain tensors and adapters: the adapter merge (EMA towards the mean of the saved adapters),
the test adapter of a task, the self-refined retrieval and the ensemble of the two classifiers.

Notation: W_t the parameters (any of down/up weight/bias) of the adapter being trained in task t, S_t = sum of
the adapters saved after tasks 0..t-1 (S_0 = 0), beta = ``adapter_momentum``.

* merge (t > 0):   W_t <- (1 - beta) W_t + beta S_t / t.  The new values are bound to the parameter's ``.data``
  (as the reference code does), so a backward through an earlier forward keeps the values that forward used.
* test adapter k:  ``stored``: W_k as saved after task k; ``prefix_mean``: S_k / k for k > 0 (W_0 for k = 0).
* retrieval:       tau_0 = task of argmax of the prototype logits of adapter 0; then repeatedly
  z = head(phi_tau(x)), tau' = task(argmax z), until tau' = tau or ``steps`` head evaluations; z of the last
  evaluated tau is the answer.
* ensemble:        softmax(z) + softmax(T * o), o the prototype cosine logits, T = tasks learned.
* statistics' batches: class after class, each class's rows in dataset order, 3 x batch_size at a time.
"""
from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

NAMES = ("down.weight", "down.bias", "up.weight", "up.bias")


def _param(adapter: nn.Module, name: str) -> nn.Parameter:
    module, attr = name.split(".")
    return getattr(getattr(adapter, module), attr)


@torch.no_grad()
def merge_(current: Sequence[nn.Module], sums: Sequence[nn.Module], saved: int, beta: float) -> None:
    """W <- (1 - beta) W + beta S / saved for every adapter of ``current`` (its ``sums`` partner holds S); a no-op
    while no adapter is saved or beta = 0. Rebinds ``.data`` (a fresh tensor), never writes in place."""
    if saved == 0 or beta == 0:
        return
    for adapter, total in zip(current, sums):
        for name in NAMES:
            p = _param(adapter, name)
            p.data = (1 - beta) * p.data + beta * _param(total, name).data / saved


@torch.no_grad()
def accumulate_(sums: Sequence[nn.Module], current: Sequence[nn.Module]) -> None:
    """S <- W + S (the saved adapter's parameters added to the running sums)."""
    for total, adapter in zip(sums, current):
        for name in NAMES:
            _param(total, name).data = _param(adapter, name).data + _param(total, name).data


@torch.no_grad()
def set_test_adapter_(target: Sequence[nn.Module], current: Sequence[nn.Module], sums: Sequence[nn.Module],
                      task: int, mode: str) -> None:
    """Write task ``task``'s test adapter into ``target`` (before ``current`` is added to ``sums``):
    ``stored``: a copy of ``current``; ``prefix_mean``: S / task, or ``current`` for task 0."""
    for out, adapter, total in zip(target, current, sums):
        for name in NAMES:
            value = _param(adapter, name) if mode == "stored" or task == 0 else _param(total, name) / task
            _param(out, name).data.copy_(value)


def zero_(adapters: Sequence[nn.Module]) -> None:
    """Every parameter of ``adapters`` to zero (S_0)."""
    with torch.no_grad():
        for adapter in adapters:
            for p in adapter.parameters():
                p.zero_()


def refine(feats: Tensor, start: Tensor, head: Callable[[Tensor], Tensor], class_to_task: Tensor,
           steps: int) -> Tuple[Tensor, Tensor]:
    """Self-refined retrieval. feats (B, T, D): phi_k(x) for the T learned adapters; start (B,) the first task
    guess; ``head``: (B, D) -> (B, C) logits with -inf on classes not to predict; class_to_task (C,).
    Returns the logits (B, C) of the last evaluated adapter and that adapter's index (B,)."""
    rows = torch.arange(len(feats), device=feats.device)
    chosen = start.clone()
    for step in range(1, steps + 1):
        logits = head(feats[rows, chosen])
        proposed = class_to_task[logits.argmax(1)]
        if step == steps or bool((proposed == chosen).all()):
            break
        chosen = proposed  # samples whose guess settled keep it (proposed == chosen for them)
    return logits, chosen


def ensemble(refined: Tensor, prototype_logits: Tensor, tasks: int) -> Tensor:
    """softmax(refined) + softmax(tasks * prototype_logits), both (B, C) with -inf on classes not to predict."""
    return torch.softmax(refined, dim=1) + torch.softmax(prototype_logits / (1 / tasks), dim=1)


def class_batches(labels: Sequence[int], classes: Sequence[int], batch_size: int) -> List[List[int]]:
    """Dataset rows in batches: class after class (in ``classes`` order), each class's rows in dataset order,
    ``batch_size`` at a time (a class's last batch may be smaller): the code's per-class statistics loaders."""
    labels = torch.as_tensor(labels)
    batches = []
    for cls in classes:
        rows = torch.nonzero(labels == int(cls)).flatten().tolist()
        batches += [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    return batches


def class_loader(plain: DataLoader, classes: Sequence[int], batch_size: int) -> DataLoader:
    """``plain``'s dataset (and workers) in :func:`class_batches` order."""
    dataset = plain.dataset
    labels = getattr(dataset, "labels", None)
    labels = labels if labels is not None else [int(y) for _, y in dataset]
    return DataLoader(dataset, batch_sampler=class_batches(labels, classes, batch_size),
                      num_workers=plain.num_workers, pin_memory=plain.pin_memory)
