"""Inference: TII head -> task id -> that task's prompt, chosen **per sample**.

For a test batch (never a batch-level vote, which would leak task identity
through batch composition):

1. frozen features (B, D) -> TII logits over seen classes -> predicted class
   -> predicted task (B,);
2. prompted features with ``task_prompts[predicted_task]`` (B, P, 2, L, H, Dh)
   -> classifier logits over seen classes -> class-incremental prediction;
3. task-incremental prediction (true task given, paper Table 4): the true
   task's prompt and logits restricted to that task's classes. Samples whose
   task was inferred correctly reuse the features of step 2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from .heads import masked_logits


@dataclass
class TaskEvaluation:
    cil_accuracy: float  # class-incremental accuracy, fraction
    til_accuracy: float  # task-incremental accuracy (true task id given), fraction
    tii_accuracy: float  # task-identity inference accuracy, fraction
    frozen_features: Tensor  # (N, D), reusable: the backbone is frozen


@torch.no_grad()
def predict_tasks(tii_head: nn.Module, frozen: Tensor, seen: Tensor, class_to_task: Tensor) -> Tensor:
    """Per-sample task ids (B,) from frozen features (B, D); ``seen`` bool (C,)."""
    tii_head.eval()
    classes = masked_logits(tii_head(frozen), seen).argmax(dim=1)
    return class_to_task.to(classes.device)[classes]


@torch.no_grad()
def evaluate_task(model: nn.Module, tii_head: nn.Module, head: nn.Module, task_prompts: Optional[Tensor],
                  class_to_task: Tensor, task: int, seen: Tensor, loader, device,
                  frozen_cache: Optional[Tensor] = None) -> TaskEvaluation:
    """Accuracies on one task's test ``loader`` (fixed order); ``task_prompts`` (T, P, 2, L, H, Dh).

    ``task_prompts=None`` evaluates the no-prompt reference (frozen features only).
    """
    model.eval()
    head.eval()
    task_classes = class_to_task.to(device) == task
    counts = {"cil": 0, "til": 0, "tii": 0, "n": 0}
    frozen_all, offset = [], 0
    for x, y in loader:
        x, y = x.to(device), torch.as_tensor(y).to(device)
        if frozen_cache is not None:
            frozen = frozen_cache[offset : offset + len(y)].to(device)
        else:
            frozen = model(x).float()
        offset += len(y)
        frozen_all.append(frozen.cpu())
        tasks = predict_tasks(tii_head, frozen, seen, class_to_task)
        feats = model(x, task_prompts[tasks]) if task_prompts is not None else frozen
        counts["cil"] += (masked_logits(head(feats), seen).argmax(1) == y).sum().item()
        wrong_task = tasks != task
        if wrong_task.any() and task_prompts is not None:
            true_prompt = task_prompts[task].expand(int(wrong_task.sum()), *task_prompts.shape[1:])
            feats[wrong_task] = model(x[wrong_task], true_prompt)
        counts["til"] += (masked_logits(head(feats), task_classes).argmax(1) == y).sum().item()
        counts["tii"] += (~wrong_task).sum().item()
        counts["n"] += len(y)
    if counts["n"] == 0:
        raise ValueError(f"test set of task {task} is empty")
    n = counts["n"]
    return TaskEvaluation(counts["cil"] / n, counts["til"] / n, counts["tii"] / n, torch.cat(frozen_all))
