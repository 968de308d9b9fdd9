"""Evaluation of any registered method on one test task.

:func:`evaluate_task` asks the method for a :class:`~norga.methods.base.Prediction`
per test batch (fixed order, no shuffling) and counts

* class-incremental accuracy: argmax of the method's task-agnostic logits over
  the classes seen so far (over all classes with ``mask_unseen=False``, as the
  authors' code; both are reported);
* task-incremental accuracy: argmax of the logits *with the true task id given*
  over that task's classes (paper Table 4);
* task-identity accuracy, when the method infers a task per sample.

Each sample's prediction comes from the method and depends on that sample only
(never a batch-level vote, which would leak task identity through batch
composition).

What a method may reuse across evaluations is its own business
(:meth:`~norga.methods.base.Method.new_eval_cache`, e.g. :mod:`norga.toolkit.feature_cache`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from ..methods.base import TestBatch
from ..toolkit.distributed import shard_of, sum_over_processes
from ..toolkit.heads import masked_logits


@dataclass
class TaskEvaluation:
    cil_accuracy: float  # class-incremental accuracy, fraction
    til_accuracy: float  # task-incremental accuracy (true task id given), fraction
    tii_accuracy: Optional[float]  # task-identity inference accuracy, fraction (None: the method infers no task)
    tii_predicted: Tuple[int, ...] = ()  # number of test samples assigned to each task 0..T-1 by the method
    cil_unmasked_accuracy: float = float("nan")  # CIL with every class's logit competing (authors' evaluation)


@torch.no_grad()
def evaluate_task(method, task: int, seen: Tensor, loader, device, cache: Any = None,
                  mask_unseen: bool = True) -> TaskEvaluation:
    """Accuracies of ``method`` on test task ``task`` (``loader``: its test set in a fixed order).

    ``seen`` bool (C,): classes of the tasks learned so far. Pass the method's
    :meth:`~norga.methods.base.Method.new_eval_cache` to every evaluation of a run to reuse work.
    ``mask_unseen=False`` lets every class's logit compete in the class-incremental argmax.
    """
    n = len(loader.dataset)
    if n == 0:
        raise ValueError(f"test set of task {task} is empty")
    shard = shard_of(loader)  # torchrun: this process evaluates a contiguous part; the counts are summed
    start, expected = (shard.start, len(shard)) if shard is not None else (0, n)
    task_classes = method.class_to_task.to(device) == task
    counts = torch.zeros(5, dtype=torch.long)  # cil, til, tii, cil_unmasked, batches without inferred task ids
    predicted = torch.zeros(method.num_tasks, dtype=torch.long)
    cil_allowed = seen if mask_unseen else torch.ones_like(seen)
    offset = start
    for x, y in loader:
        x, y = x.to(device), torch.as_tensor(y).to(device)
        index = torch.arange(offset, offset + len(y))
        offset += len(y)
        out = method.predict(TestBatch(x, task, index, n, seen, loader.dataset), cache)
        counts[0] += (masked_logits(out.logits, cil_allowed).argmax(1) == y).sum().item()
        counts[3] += (out.logits.argmax(1) == y).sum().item()
        counts[1] += (masked_logits(out.true_task_logits, task_classes).argmax(1) == y).sum().item()
        if out.task_ids is None:
            counts[4] += 1
        else:
            counts[2] += (out.task_ids == task).sum().item()
            predicted = predicted + torch.bincount(out.task_ids.cpu(), minlength=len(predicted))
    if offset - start != expected:
        raise ValueError(f"test loader of task {task} yielded {offset - start} samples, its dataset has {expected}")
    totals = sum_over_processes(torch.cat([counts, predicted])).tolist()
    (cil, til, tii, cil_unmasked, not_inferred), predicted = totals[:5], totals[5:]
    inferred = not_inferred == 0
    return TaskEvaluation(cil / n, til / n, tii / n if inferred else None,
                          tuple(predicted) if inferred else (), cil_unmasked / n)
