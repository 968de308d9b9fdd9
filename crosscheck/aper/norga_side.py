"""norga's side of the APER cross-check: ``python -m crosscheck.aper.norga_side --out DIR``.

Writes DIR/norga_aper.pt for ``crosscheck/aper/reference_side.py`` (zhoudw-zdw/RevisitingCIL):

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, ``aper`` with the official adapter
  values (``cifar100_aper.yaml``: bottleneck 64, scale 0.1); its adapters are moved away from their zero-output
  start instead of being trained, then the 5 tasks' first 8 training images per class give the prototypes of
  [frozen, adapted] features. Saved: the backbone, the adapters, the frozen and adapted features of 17 real test
  images, the prototypes and the logits after every task;
* **training steps**: from norga's initial adapters and cosine head, one epoch of three fixed batches of 20
  training images of classes 0-9 (no augmentation) at the official SGD values (lr 0.01, momentum 0.9, weight
  decay 5e-4, adapter dropout 0.1 with the stream restarted after the head is drawn); the initial and trained
  adapters and head.
"""
from __future__ import annotations

from pathlib import Path

import torch

from crosscheck.harness.adapters_norga import (backbone_state, build, first_task_steps, moved_instead_of_trained,
                                               plain_loaders, state_of, task_data, test_images)
from crosscheck.harness.norga_cli import run_norga_side
from norga.methods.adapter_stage import TunedView

CONFIG = "cifar100_aper.yaml"


@torch.no_grad()
def forward_check(shared: Path) -> dict:
    vit, method = build(CONFIG, [], shared)
    with moved_instead_of_trained(torch.Generator().manual_seed(7)):
        x_test, _ = test_images(shared)
        tasks = []
        for t, (x, y) in enumerate(task_data(shared, 8)):
            method.learn_task(t, plain_loaders(x, y))
            feats = torch.cat([TunedView(method.model, None)(x_test), TunedView(method.model, 0)(x_test)], dim=1)
            tasks.append({"images": x, "labels": y, "prototypes": method.prototypes.clone(),
                          "logits": method.logits(feats)})
    return {"state_dict": backbone_state(vit), "tuned": state_of(method.tuned), "images": x_test,
            "features": feats, "tasks": tasks}


def training_steps(shared: Path) -> dict:
    _, method = build(CONFIG, ["method.epochs=1", "method.batch_size=20"], shared)
    return first_task_steps(method, shared, method.cfg.method)


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_aper.pt", lambda shared: {"forward": forward_check(shared),
                                                                    "steps": training_steps(shared)}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
