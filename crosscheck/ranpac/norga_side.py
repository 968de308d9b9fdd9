"""norga's side of the RanPAC cross-check: ``python -m crosscheck.ranpac.norga_side --out DIR``.

Writes DIR/norga_ranpac.pt for ``crosscheck/ranpac/reference_side.py`` (RanPAC/RanPAC):

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, ``ranpac`` with the official adapter
  first session (``cifar100_ranpac_adapt.yaml``: bottleneck 64, scale 0.1) and M = 2000 (the evidence arm's);
  its adapters are moved away from their zero-output start instead of being trained, then the 5 tasks' first 8
  training images per class go through its phase 2 (random features, Gram matrix, lambda on 20% held out, ridge
  solve). Saved: the backbone, the adapters, W, every task's images with the order its lambda split used, the
  lambda chosen, W_o and the logits of 17 real test images after every task, and the final G and C;
* **training steps**: from norga's initial adapters and cosine head, one epoch of three fixed batches of 20
  training images of classes 0-9 (no augmentation) at the official SGD values (lr 0.01, momentum 0.9, weight
  decay 5e-4, adapter dropout 0.1 with the stream restarted after the head is drawn); the initial and trained
  adapters and head.
"""
from __future__ import annotations

from pathlib import Path

import torch

import norga.methods.ranpac as ranpac_module
from crosscheck.harness.adapters_norga import (backbone_state, build, first_task_steps, moved_instead_of_trained,
                                               plain_loaders, state_of, task_data, test_images)
from crosscheck.harness.norga_cli import run_norga_side
from norga.methods.adapter_stage import TunedView
from norga.toolkit.seeding import task_generator

CONFIG = "cifar100_ranpac_adapt.yaml"


@torch.no_grad()
def forward_check(shared: Path) -> dict:
    vit, method = build(CONFIG, ["method.projection_dim=2000"], shared)
    with moved_instead_of_trained(torch.Generator().manual_seed(7)):
        x_test, _ = test_images(shared)
        tasks = []
        for t, (x, y) in enumerate(task_data(shared, 8)):
            method.learn_task(t, plain_loaders(x, y))
            feats = TunedView(method.model, method.active)(x_test)
            split = torch.randperm(len(y), generator=task_generator(method.cfg.seed, t, ranpac_module.SPLIT_STAGE))
            tasks.append({"images": x, "labels": y, "split_order": split, "ridge": method.chosen_ridges[-1],
                          "head": method.head.clone(), "features": feats, "logits": method.logits(feats)})
    return {"state_dict": backbone_state(vit), "tuned": state_of(method.tuned), "images": x_test,
            "projection": method.projection.clone(), "tasks": tasks, "gram": method.gram.clone(),
            "targets": method.targets.clone()}


def training_steps(shared: Path) -> dict:
    _, method = build(CONFIG, ["method.projection_dim=100", "method.first_session.epochs=1",
                               "method.first_session.batch_size=20"], shared)
    return first_task_steps(method, shared, method.cfg.method.first_session)


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_ranpac.pt", lambda shared: {"forward": forward_check(shared),
                                                                      "steps": training_steps(shared)}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
