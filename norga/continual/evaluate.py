"""Inference: TII head -> task id -> that task's prompt, chosen **per sample**.

For a test batch (never a batch-level vote, which would leak task identity
through batch composition):

1. frozen features (B, D) -> TII logits over seen classes -> predicted class
   -> predicted task (B,);
2. prompted features with ``task_prompts[predicted_task]`` (B, P, 2, L, H, Dh)
   -> classifier logits over seen classes (over all classes with
   ``mask_unseen=False``, as the authors' code) -> class-incremental prediction;
3. task-incremental prediction (true task given, paper Table 4): the true
   task's prompt and logits restricted to that task's classes.

Features are cached across evaluations (:class:`FeatureCache`): frozen
features never change, and the features of a test sample under the prompt of
task k never change once task k is learned (the prompt and the gates are
frozen then); only the heads move. So each (sample, prompt) pair is computed
once per run instead of once per evaluation, which makes the accuracy matrix
far cheaper without changing any number it holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from .heads import masked_logits


@dataclass
class TaskEvaluation:
    cil_accuracy: float  # class-incremental accuracy, fraction
    til_accuracy: float  # task-incremental accuracy (true task id given), fraction
    tii_accuracy: float  # task-identity inference accuracy, fraction
    tii_predicted: Tuple[int, ...] = ()  # number of test samples assigned to each task 0..T-1 by TII
    cil_unmasked_accuracy: float = float("nan")  # CIL with every class's logit competing (authors' evaluation)


@dataclass
class FeatureCache:
    """Test features of one run, kept on the CPU.

    ``frozen[i]``: (N_i, D) frozen features of test task i (filled on first use).
    ``prompted[(i, k)]``: ((N_i, D) features of test task i under prompt k, (N_i,) bool "computed").
    Valid only while every cached prompt k belongs to a finished task.
    """

    frozen: Dict[int, Tensor] = field(default_factory=dict)
    prompted: Dict[Tuple[int, int], Tuple[Tensor, Tensor]] = field(default_factory=dict)

    def slot(self, task: int, prompt: int, n: int, dim: int) -> Tuple[Tensor, Tensor]:
        key = (task, prompt)
        if key not in self.prompted:
            self.prompted[key] = (torch.zeros(n, dim), torch.zeros(n, dtype=torch.bool))
        return self.prompted[key]


@torch.no_grad()
def predict_tasks(tii_head: nn.Module, frozen: Tensor, seen: Tensor, class_to_task: Tensor) -> Tensor:
    """Per-sample task ids (B,) from frozen features (B, D); ``seen`` bool (C,)."""
    tii_head.eval()
    classes = masked_logits(tii_head(frozen), seen).argmax(dim=1)
    return class_to_task.to(classes.device)[classes]


@torch.no_grad()
def prompted_features(model: nn.Module, x: Tensor, index: Tensor, prompt_ids: Tensor, task_prompts: Tensor,
                      cache: FeatureCache, task: int, n: int) -> Tensor:
    """Features (B, D) of images ``x`` (B, C, H, W), sample b prompted with ``task_prompts[prompt_ids[b]]``.

    ``index`` (B,) are the samples' positions in test task ``task`` (size ``n``);
    only pairs missing from ``cache`` are computed, one forward per prompt id.
    """
    out = torch.empty(len(x), model.embed_dim)
    for k in prompt_ids.unique().tolist():
        chosen = (prompt_ids == k).cpu()
        feats, have = cache.slot(task, k, n, model.embed_dim)
        missing = chosen & ~have[index]
        if missing.any():
            prompt = task_prompts[k].expand(int(missing.sum()), *task_prompts.shape[1:])
            feats[index[missing]] = model(x[missing.to(x.device)], prompt).float().cpu()
            have[index[missing]] = True
        out[chosen] = feats[index[chosen]]
    return out


@torch.no_grad()
def evaluate_task(model: nn.Module, tii_head: nn.Module, head: nn.Module, task_prompts: Optional[Tensor],
                  class_to_task: Tensor, task: int, seen: Tensor, loader, device,
                  cache: Optional[FeatureCache] = None, mask_unseen: bool = True) -> TaskEvaluation:
    """Accuracies on one task's test ``loader`` (fixed order, no shuffling); ``task_prompts`` (T, P, 2, L, H, Dh).

    ``task_prompts=None`` evaluates the no-prompt reference (frozen features only).
    Pass the same ``cache`` to every evaluation of a run to reuse features.
    ``mask_unseen=False`` lets every class's classifier logit compete (the TII
    logits stay restricted to ``seen``).
    """
    model.eval()
    head.eval()
    cache = cache if cache is not None else FeatureCache()
    n = len(loader.dataset)
    task_classes = class_to_task.to(device) == task
    frozen_all = cache.frozen.get(task)
    new_frozen = [] if frozen_all is None else None
    counts, offset = {"cil": 0, "til": 0, "tii": 0, "cil_unmasked": 0}, 0
    predicted = torch.zeros(int(class_to_task.max()) + 1, dtype=torch.long)
    cil_allowed = seen if mask_unseen else torch.ones_like(seen)
    for x, y in loader:
        x, y = x.to(device), torch.as_tensor(y).to(device)
        index = torch.arange(offset, offset + len(y))
        offset += len(y)
        frozen = model(x).float() if frozen_all is None else frozen_all[index].to(device)
        if new_frozen is not None:
            new_frozen.append(frozen.cpu())
        tasks = predict_tasks(tii_head, frozen, seen, class_to_task)
        if task_prompts is None:
            feats = true_feats = frozen
        else:
            feats = prompted_features(model, x, index, tasks, task_prompts, cache, task, n).to(device)
            true_feats = prompted_features(model, x, index, torch.full_like(tasks, task), task_prompts, cache,
                                           task, n).to(device)
        logits = head(feats)
        counts["cil"] += (masked_logits(logits, cil_allowed).argmax(1) == y).sum().item()
        counts["cil_unmasked"] += (logits.argmax(1) == y).sum().item()
        counts["til"] += (masked_logits(head(true_feats), task_classes).argmax(1) == y).sum().item()
        counts["tii"] += (tasks == task).sum().item()
        predicted = predicted + torch.bincount(tasks.cpu(), minlength=len(predicted))
    if offset == 0:
        raise ValueError(f"test set of task {task} is empty")
    if offset != n:
        raise ValueError(f"test loader of task {task} yielded {offset} samples, its dataset has {n}")
    if new_frozen is not None:
        cache.frozen[task] = torch.cat(new_frozen)
    return TaskEvaluation(counts["cil"] / n, counts["til"] / n, counts["tii"] / n, tuple(predicted.tolist()),
                          counts["cil_unmasked"] / n)
