"""norga's side of the EASE cross-check: ``python -m crosscheck.ease.norga_side --out DIR``.

Writes DIR/norga_ease.pt for ``crosscheck/ease/reference_side.py`` (sun-hailong/CVPR24-Ease):

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, ``ease`` with the official values
  (``cifar100_ease.yaml``: a subspace of adapters per task, bottleneck 64, scale 0.1, ``recalc_similarity``,
  ``reweight`` with alpha 0.1 over the tasks); each new subspace's adapters are moved away from their zero-output
  start instead of being trained, then the task's first 8 training images per class give its real prototypes
  in every subspace so far and the complement synthesises the old classes' ones. Saved: the backbone, every
  subspace's adapters, and after every task the subspace features of 17 real test images, the prototypes and
  the reweighted logits;
* **training steps**: tasks 0 and 1, each one epoch of three fixed batches of 20 training images of its classes
  (0-9, then 10-19; no augmentation) at the official SGD values (lr 0.025, momentum 0.9, weight decay 5e-4,
  adapter dropout 0.1 with the stream restarted after each head is drawn); every subspace's initial and trained
  adapters and each task's head.
"""
from __future__ import annotations

from pathlib import Path

import torch

from crosscheck.harness.adapters_norga import (DROPOUT_SEED, HeadRecorder, backbone_state, batches, build, move_away,
                                               plain_loaders, sgd_opts, state_of, task_data, test_images,
                                               three_batches)
from crosscheck.harness.norga_cli import run_norga_side
from crosscheck.harness.norga_inputs import TASKS
from norga.methods.adapter_stage import TunedView
from norga.methods.base import TaskLoaders
from norga.methods.hooks import HOOKS

CONFIG = "cifar100_ease.yaml"


@torch.no_grad()
def forward_check(shared: Path) -> dict:
    vit, method = build(CONFIG, [], shared)
    g = torch.Generator().manual_seed(7)
    moved = lambda name, task, features, params, *args, **kwargs: move_away(params, g)  # noqa: E731
    with HOOKS.replaced("adapter_training", moved):  # each new subspace moved away from zero instead of trained
        x_test, _ = test_images(shared)
        tasks = []
        for t, (x, y) in enumerate(task_data(shared, 8)):
            method.learn_task(t, plain_loaders(x, y))
            feats = torch.stack([TunedView(method.model, k)(x_test) for k in range(t + 1)], dim=1)
            tasks.append({"images": x, "labels": y, "features": feats, "prototypes": method.prototypes.clone(),
                          "logits": method.logits(feats)})
    return {"state_dict": backbone_state(vit), "tuned": state_of(method.tuned), "images": x_test, "tasks": tasks}


def training_steps(shared: Path) -> dict:
    _, method = build(CONFIG, ["method.epochs=1", "method.batch_size=20"], shared)
    initial, after = [], []
    data = [three_batches(shared, TASKS[t]) for t in range(2)]
    # the new subspace's initial values, seen when its training head is created (before any step)
    with HOOKS.observed("head_created", lambda head: initial.append(state_of(method.tuned))), \
            HeadRecorder() as heads:
        for t, (x, y) in enumerate(data):
            method.learn_task(t, TaskLoaders(batches(x, y), batches(x, y), None))
            after.append(state_of(method.tuned))
    return {"tasks": [{"images": x, "labels": y, "initial": initial[t], "trained": after[t],
                       "initial_head": heads.initial[t], "trained_head": state_of(heads.heads[t])}
                      for t, (x, y) in enumerate(data)],
            "dropout_seed": DROPOUT_SEED,
            "opts": sgd_opts(method.cfg.method)}


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_ease.pt", lambda shared: {"forward": forward_check(shared),
                                                                    "steps": training_steps(shared)}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
