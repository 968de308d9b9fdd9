"""norga's side of the SD-LoRA cross-check: ``python -m crosscheck.sd_lora.norga_side --out DIR``.

Writes DIR/norga_sd_lora.pt for ``crosscheck/sd_lora/reference_side.py``:

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, 16 real CIFAR-100 test images, norga's
  ``sd_lora`` (rank 10, q and v of all 12 blocks) given three tasks' components drawn here (A: its own
  Kaiming-uniform draw, B: N(0, 0.05^2)) and magnitudes 0.9, 0.6, 1.3; the features and the logits of the seen
  tasks' classes after 1 task (one un-normalised component) and after 3 (two normalised earlier directions and the
  newest);
* **training steps**: from norga's initial head and components, ``learn_task`` of task 0 and then task 1 on three
  fixed batches of 20 training images each (no augmentation), one epoch, SGD momentum 0.9 at 8e-3: each task's
  initial A, and after the task every component's A and B, the magnitudes and the head.
"""
from __future__ import annotations

from pathlib import Path

import torch

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.lora_inputs import plain_state, task_batches, test_images
from crosscheck.harness.norga_inputs import method_of
from norga.methods.base import TaskLoaders
from norga.methods.hooks import HOOKS
from norga.models.lora_qkv import branch_state

SD_LORA = ["method.rank=10", "method.epochs=1", "method.batch_size=20", "method.lr=0.008", "method.momentum=0.9",
           "method.magnitude_init=0.8", "method.magnitudes=reset", "method.normalise=factors"]
MAGNITUDES = (0.9, 0.6, 1.3)


def head_state(method) -> dict:
    return {k: v.clone() for k, v in method.head.state_dict().items()}


@torch.no_grad()
def forward_check(shared: Path, weights: Path) -> dict:
    vit, method = method_of("cifar100_sd_lora.yaml", SD_LORA, weights)
    x = test_images(shared)
    g = torch.Generator().manual_seed(11)
    out = {"state_dict": plain_state(vit), "images": x, "head": head_state(method), "frozen": method.model(x),
           "after": {}}
    for task in range(3):
        method.start_task(task)
        for wrapper in method.wrappers.values():
            wrapper.branches[-1].up.copy_(0.05 * torch.randn(wrapper.branches[-1].up.shape, generator=g))
        for alpha, value in zip(method.magnitudes, MAGNITUDES):
            alpha.fill_(value)
        if task + 1 in (1, 3):
            features = method.model(x)
            out["after"][task + 1] = {"features": features, "logits": method.head(features)[:, :10 * (task + 1)],
                                      "branches": branch_state(method.wrappers),
                                      "magnitudes": [float(a) for a in method.magnitudes]}
    return out


def training_steps(shared: Path, weights: Path) -> dict:
    _, method = method_of("cifar100_sd_lora.yaml", SD_LORA, weights)
    out = {"initial_head": head_state(method), "tasks": []}

    def record_start(method, task: int) -> None:  # the new component's initial A, before any step
        out["tasks"].append({"initial_down": {key: w.branches[-1].down.detach().clone()
                                              for key, w in method.wrappers.items()}})

    with HOOKS.observed("task_started", record_start):
        for task in (0, 1):
            batches = task_batches(shared, task)
            method.learn_task(task, TaskLoaders(batches, None, None))
            magnitudes = [float(a.detach()) for a in method.magnitudes]
            out["tasks"][task].update(batches=batches, branches=branch_state(method.wrappers),
                                      head=head_state(method), magnitudes=magnitudes)
    return out


def main(argv=None) -> int:
    def build(shared: Path) -> dict:
        weights = weights_in(shared)
        return {"forward": forward_check(shared, weights), "steps": training_steps(shared, weights)}

    return run_norga_side(__doc__, "norga_sd_lora.pt", build, argv, one_thread=True)


if __name__ == "__main__":
    raise SystemExit(main())
