"""norga's side of the RanPAC cross-check: ``python -m bench.crosscheck.ranpac_norga_side --out DIR``.

Writes DIR/norga_ranpac.pt for ``bench/crosscheck/ranpac_reference_side.py`` (RanPAC/RanPAC):

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

import argparse
from pathlib import Path

import torch

import norga.methods.ranpac as ranpac_module
from bench.crosscheck.adapters_norga import (DROPOUT_SEED, HeadRecorder, backbone_state, batches, build, move_away,
                                             plain_loaders, state_of, task_data, test_images, three_batches)
from bench.crosscheck.norga_side import TASKS
from norga.methods.adapter_stage import TunedView, freeze
from norga.methods.base import TaskLoaders
from norga.toolkit.seeding import task_generator

CONFIG = "cifar100_ranpac_adapt.yaml"


@torch.no_grad()
def forward_check(shared: Path) -> dict:
    vit, method = build(CONFIG, ["method.projection_dim=2000"], shared)
    g = torch.Generator().manual_seed(7)
    trained = ranpac_module.tune_first_task

    def instead_of_training(name, model, tuned, *args, **kwargs):
        move_away(list(tuned.parameters()), g)
        freeze(tuned)

    ranpac_module.tune_first_task = instead_of_training
    try:
        x_test, _ = test_images(shared)
        tasks = []
        for t, (x, y) in enumerate(task_data(shared, 8)):
            method.learn_task(t, plain_loaders(x, y))
            feats = TunedView(method.model, method.active)(x_test)
            split = torch.randperm(len(y), generator=task_generator(method.cfg.seed, t, ranpac_module._SPLIT_STAGE))
            tasks.append({"images": x, "labels": y, "split_order": split, "ridge": method.chosen_ridges[-1],
                          "head": method.head.clone(), "features": feats, "logits": method.logits(feats)})
    finally:
        ranpac_module.tune_first_task = trained
    return {"state_dict": backbone_state(vit), "tuned": state_of(method.tuned), "images": x_test,
            "projection": method.projection.clone(), "tasks": tasks, "gram": method.gram.clone(),
            "targets": method.targets.clone()}


def training_steps(shared: Path) -> dict:
    _, method = build(CONFIG, ["method.projection_dim=100", "method.first_session.epochs=1",
                               "method.first_session.batch_size=20"], shared)
    x, y = three_batches(shared, TASKS[0])
    initial = state_of(method.tuned)
    with HeadRecorder() as heads:
        method.learn_task(0, TaskLoaders(batches(x, y), batches(x, y), None))
    first = method.cfg.method.first_session
    return {"images": x, "labels": y, "initial": initial, "trained": state_of(method.tuned),
            "initial_head": heads.initial[0], "trained_head": state_of(heads.heads[0]), "dropout_seed": DROPOUT_SEED,
            "opts": {"lr": first.lr, "weight_decay": first.weight_decay, "min_lr": first.min_lr,
                     "dropout": first.adapter_dropout}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = {"forward": forward_check(args.shared), "steps": training_steps(args.shared)}
    torch.save(saved, args.out / "norga_ranpac.pt")
    print(f"wrote {args.out / 'norga_ranpac.pt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
