"""norga's side of the HiDe-LoRA cross-check: ``python -m crosscheck.hidelora.norga_side --out DIR``.

Writes DIR/norga_hidelora.pt for ``crosscheck/hidelora/reference_side.py`` (run under the reference's timm):

* forward: the DINOv2 ViT-S/14 of ../shared converted by timm (56 px), three task LoRAs (rank 5 on k, v of blocks
  0-4, random A and B per task and block), 8 real CIFAR-100 test images each under the LoRA of its own task id
  (0, 1, 2, 0, ...): features (8, 384) and head logits (8, 50);
* training: from norga's initial task-0 LoRA and head, one epoch of three fixed batches of 20 real training images
  (classes 0-9, no augmentation) of WTP as task 0 (Adam, constant lr 0.01, clip 2.0, CE over the task's classes +
  reg 0.1 x the authors' contrastive regulariser); then task 1 from task 0's LoRA on three batches of classes 10-19
  with task 0's class statistics as prototypes (covariance statistics, so one mean per old class), and the factor
  momentum 0.1 after it. Initial and trained tensors are saved.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import torch

from crosscheck.harness.lora_inputs import plain_state
from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import method_of, real_batch
from crosscheck.harness.steps_norga import step_batches
from norga.methods.base import TaskLoaders
from norga.methods.hooks import HOOKS

CONFIG = "cifar100_hidelora.yaml"
STEP = ["method.wtp.epochs=1", "method.wtp.schedule=constant", "method.wtp.warmup_epochs=0", "method.wtp.lr=0.01",
        "method.scale_lr_by_batch=false", "method.wtp.batch_size=20", "method.wtp.grad_clip=2.0", "method.wtp.reg=0.1",
        "method.stats.kind=covariance", "method.wtp.momentum=0.1"]


def lora_tensors(method) -> Dict[str, torch.Tensor]:
    """Every block's factors of every task, as the reference lays them out: ``{k,v}_lora_{A,B}`` (T, blocks, D, r)
    and (T, blocks, r, D); the head's weight and bias."""
    out = {}
    for p, name in enumerate(method.c.lora_targets):
        downs = [[w.branches[t].down[p].detach().T for w in method.wrappers.values()]
                 for t in range(len(next(iter(method.wrappers.values())).branches))]
        ups = [[w.branches[t].up[p].detach().T for w in method.wrappers.values()] for t in range(len(downs))]
        out[f"{name}_lora_A"] = torch.stack([torch.stack(d) for d in downs]).clone()
        out[f"{name}_lora_B"] = torch.stack([torch.stack(u) for u in ups]).clone()
    out.update({f"head.{k}": v.detach().clone() for k, v in method.head.state_dict().items()})
    return out


@torch.no_grad()
def forward_check(x: torch.Tensor, weights: Path) -> dict:
    vit, method = method_of(CONFIG, [], weights)
    g = torch.Generator().manual_seed(1)
    for t in range(3):
        method.start_task(t)
        for w in method.wrappers.values():
            w.branches[t].down.copy_(torch.randn(w.branches[t].down.shape, generator=g) * 0.2)
            w.branches[t].up.copy_(torch.randn(w.branches[t].up.shape, generator=g) * 0.2)
    tasks = torch.arange(len(x)) % 3
    feats = torch.cat([method.tuned(x[i:i + 1], int(tasks[i])) for i in range(len(x))])
    return {"state_dict": plain_state(vit), "images": x, "tasks": tasks,
            "frozen": method.model(x), "features": feats, "logits": method.head(feats), "lora": lora_tensors(method)}


def train_task(method, task: int, batches: List[tuple]) -> dict:
    """WTP of ``task`` on ``batches`` from the method's state; the initial and trained (after the momentum) factors
    (the initial ones seen through the hook point ``task_started`` of :mod:`norga.methods.hooks`)."""
    captured = {}
    with HOOKS.observed("task_started", lambda m, t: captured.update(initial=lora_tensors(m))):
        method.train_wtp(task, TaskLoaders(batches, None, None))
    return {"initial": captured["initial"], "trained": lora_tensors(method), "batches": batches}


def training_check(shared: Path, weights: Path) -> dict:
    _, method = method_of(CONFIG, STEP, weights)
    out = {}
    for task in (0, 1):
        x, y = step_batches(shared, 6, task)
        out[f"task{task}"] = train_task(method, task, [(x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)])
        stats_x = x  # the statistics the next task's regulariser reads: the task's class means under its LoRA
        feats = method.tuned(stats_x, task).detach()
        for c in method.task_classes[task]:
            method.instructed.add(c, feats[y == c])
    out["prototypes_task1"] = method.instructed.means(method.task_classes[0])
    return out


def main(argv=None) -> int:
    def build(shared: Path) -> dict:
        weights = weights_in(shared)
        return {"forward": forward_check(real_batch(shared), weights), "training": training_check(shared, weights)}

    return run_norga_side(__doc__, "norga_hidelora.pt", build, argv)


if __name__ == "__main__":
    raise SystemExit(main())
