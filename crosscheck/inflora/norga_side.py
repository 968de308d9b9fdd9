"""norga's side of the InfLoRA cross-check: ``python -m crosscheck.inflora.norga_side --out DIR``.

Writes DIR/norga_inflora.pt for ``crosscheck/inflora/reference_side.py``:

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, 16 real CIFAR-100 test images, norga's
  ``inflora`` (rank 10, k and v of all 12 blocks) given five tasks' branches drawn here (A: orthonormal rows / sqrt(3)
  as the design makes them, the same for k and v; B: N(0, 0.05^2)); the features and the logits of the seen tasks'
  classes after 1, 3 and 5 tasks, and the representation matrices (mean x x^T of every block's qkv input) of the
  images in two batches with all five branches;
* **memory**: the frozen model's representation matrices of five tasks (60 training images each) and the DualGPM
  memory norga keeps after each task (``update_memory``) under the official thresholds (0.95 -> 1.0) and under
  high ones (0.999 -> 1.0) that switch blocks to the complement (``retain``);
* **training steps**: from norga's initial head, ``learn_task`` of task 0 and then task 1 on three fixed batches of
  20 training images each (no augmentation), 2 epochs (the official cosine needs at least 2: lr, then 0.0157 lr),
  Adam 5e-4: the designed A, the trained B, the head and the memory after each task.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.lora_inputs import plain_state, task_batches, test_images
from crosscheck.harness.norga_inputs import method_of
from norga.methods.base import TaskLoaders
from norga.methods.inflora import threshold_at, update_memory
from norga.models.lora_qkv import branch_state

INFLORA = ["method.rank=10", "method.epochs=2", "method.batch_size=20", "method.lr=0.0005", "method.threshold=0.95",
           "method.threshold_end=1.0"]
THRESHOLDS = {"official": (0.95, 1.0), "high": (0.999, 1.0)}


def memory_state(memory: dict) -> dict:
    return {key: (basis.clone(), kind) for key, (basis, kind) in memory.items()}


@torch.no_grad()
def forward_check(shared: Path, weights: Path) -> dict:
    vit, method = method_of("cifar100_inflora.yaml", INFLORA, weights)
    x = test_images(shared)
    g = torch.Generator().manual_seed(7)
    out = {"state_dict": plain_state(vit), "images": x,
           "head": {k: v.clone() for k, v in method.head.state_dict().items()}, "frozen": method.model(x), "after": {}}
    for task in range(5):
        for wrapper in method.wrappers.values():
            branch = wrapper.add_branch(10)
            rows = torch.linalg.qr(torch.randn(384, 10, generator=g, dtype=torch.float64))[0].T.float()
            branch.down.copy_((rows / math.sqrt(3)).expand_as(branch.down))
            branch.up.copy_(0.05 * torch.randn(branch.up.shape, generator=g))
        if task + 1 in (1, 3, 5):
            features = method.model(x)
            out["after"][task + 1] = {"features": features, "logits": method.head(features)[:, :10 * (task + 1)]}
    out["branches"] = branch_state(method.wrappers)
    out["representation"] = method.representations([(x[:8], None), (x[8:], None)])
    return out


@torch.no_grad()
def memory_check(shared: Path, weights: Path) -> dict:
    _, method = method_of("cifar100_inflora.yaml", INFLORA, weights)
    matrices = [method.representations(task_batches(shared, t)) for t in range(5)]
    out = {"matrices": matrices}
    for name, (start, end) in THRESHOLDS.items():
        memory, trace = {}, []
        for t, mats in enumerate(matrices):
            eps = threshold_at(t, 5, start, end)
            memory = {key: update_memory(memory.get(key), mats[key], eps) for key in mats}
            trace.append(memory_state(memory))
        out[name] = {"thresholds": (start, end), "memory": trace}
    return out


def training_steps(shared: Path, weights: Path) -> dict:
    _, method = method_of("cifar100_inflora.yaml", INFLORA, weights)
    out = {"initial_head": {k: v.clone() for k, v in method.head.state_dict().items()}, "tasks": []}
    for task in (0, 1):
        batches = task_batches(shared, task)
        method.learn_task(task, TaskLoaders(batches, None, None))
        out["tasks"].append({"batches": batches, "branches": branch_state(method.wrappers),
                             "head": {k: v.clone() for k, v in method.head.state_dict().items()},
                             "memory": memory_state(method.memory)})
    return out


def build(shared: Path) -> dict:
    """The saved dict (forward, memory, steps), then the memory dimensions after 5 tasks printed."""
    weights = weights_in(shared)
    saved = {"forward": forward_check(shared, weights), "memory": memory_check(shared, weights),
             "steps": training_steps(shared, weights)}
    for name in THRESHOLDS:
        last = saved["memory"][name]["memory"][-1]
        print(f"memory after 5 tasks ({name}): dims", {k: (int(b.shape[1]), kind) for k, (b, kind) in last.items()})
    return saved


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_inflora.pt", build, argv, one_thread=True)


if __name__ == "__main__":
    raise SystemExit(main())
