"""norga's side of the TUNA cross-check: ``python -m crosscheck.tuna.norga_side --out DIR``.

DIR/tuna_norga.pt holds, for ``crosscheck/tuna/reference_side.py`` (the authors' code, via the fork
Ngahoang2005/ICCV2025-TUNA at 77d4f10):

* the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px (``backbone``);
* **training steps**: task 0, then task 1, each one epoch of three fixed batches of 20 real CIFAR-100 training
  images of its classes (0-9, 10-19; no augmentation), norga's ``cifar100_tuna.yaml`` values with batch 20 and
  adapter dropout 0 (the only random draw of a step), the orthogonality penalty on (reg 0.001) so task 1 runs
  every loss term; the initial adapter and head block of each task and the trained ones;
* **forward**: 8 real test images with the two task adapters randomised (adapters 1, 2 and both head blocks): the
  features under each adapter, the elect-merged slot 0, the entropy-selected adapter and the combined scores.
"""
from __future__ import annotations

from pathlib import Path

import torch

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import method_of, real_batch
from crosscheck.harness.steps_norga import step_batches
from norga.methods.base import TestBatch
from norga.models.adapters import tuning
from norga.toolkit.feature_cache import FeatureCache

OVERRIDES = ["method.adapter_dropout=0", "method.batch_size=20", "method.epochs=1", "method.orth_weight=0.001"]


def adapter_state(method, k: int) -> dict:
    """Adapter k of every block: {block: {down.weight, down.bias, up.weight, up.bias}} (copies)."""
    return {b: {n: v.detach().clone() for n, v in block.tuned[k].state_dict().items()}
            for b, block in enumerate(method.blocks)}


def train_two_tasks(method, shared: Path) -> dict:
    """Task 0 and task 1 through the method's own adapter stage (statistics and alignment are left out)."""
    out = {}
    for task in (0, 1):
        new = method.add_adapter()
        if task > 0:
            for block in method.blocks:
                block.tuned[task + 1].load_state_dict(block.tuned[task].state_dict())
        method.add_head(task)
        x, y = step_batches(shared, per_class=6, task=task)
        out[task] = {"images": x, "labels": y, "adapter_init": adapter_state(method, task + 1),
                     "head_init": [h.detach().clone() for h in method.heads]}
        method.train_adapter(task, new, [(x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)])
        method.freeze_adapters()
        out[task].update(adapter=adapter_state(method, task + 1), heads=[h.detach().clone() for h in method.heads],
                         first_adapter=adapter_state(method, 1))  # task 0's adapter (moved by task 1's penalty)
    method.learned_tasks = 2
    return out


@torch.no_grad()
def forward(method, shared: Path) -> dict:
    """Randomised adapters 1, 2 and head blocks; features, merge and prediction of 8 test images."""
    g = torch.Generator().manual_seed(7)
    for block in method.blocks:
        for k in (1, 2):
            for p in block.tuned[k].parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    for h in method.heads:
        h.copy_(torch.randn(h.shape, generator=g))
    method.merge_universal(1)
    x = real_batch(shared, classes=range(0, 20, 3))
    feats = {}
    for k in (0, 1, 2):
        with tuning(method.model, k):
            feats[k] = method.model(x).float()
    seen = torch.zeros(method.num_classes, dtype=torch.bool)
    seen[:20] = True
    pred = method.predict(TestBatch(x, 0, torch.arange(len(x)), len(x), seen), FeatureCache())
    return {"images": x, "adapters": {k: adapter_state(method, k) for k in (0, 1, 2)},
            "heads": [h.clone() for h in method.heads], "features": feats, "scores": pred.logits[:, :20],
            "chosen": pred.task_ids}


def build(shared: Path) -> dict:
    """The backbone, both tasks' training steps, then the forward check on the trained method, and its values."""
    vit, method = method_of("cifar100_tuna.yaml", OVERRIDES, weights_in(shared))
    backbone = {k: v.float().clone() for k, v in vit.state_dict().items() if ".tuned." not in k}
    steps = train_two_tasks(method, shared)
    return {"backbone": backbone, "steps": steps, "forward": forward(method, shared),
            "config": {k: getattr(method.c, k) for k in ("lr", "weight_decay", "momentum", "scale", "margin",
                                                          "orth_weight", "bottleneck", "adapter_scale")}}


def main(argv=None) -> int:
    return run_norga_side(__doc__, "tuna_norga.pt", build, argv)


if __name__ == "__main__":
    raise SystemExit(main())
