"""norga's side of the APER cross-check: ``python -m bench.crosscheck.aper_norga_side --out DIR``.

Writes DIR/norga_aper.pt for ``bench/crosscheck/aper_reference_side.py`` (zhoudw-zdw/RevisitingCIL):

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

import argparse
from pathlib import Path

import torch

import norga.methods.aper as aper_module
from bench.crosscheck.adapters_norga import (DROPOUT_SEED, HeadRecorder, backbone_state, batches, build, move_away,
                                             plain_loaders, state_of, task_data, test_images, three_batches)
from bench.crosscheck.norga_side import TASKS
from norga.methods.adapter_stage import TunedView, freeze
from norga.methods.base import TaskLoaders

CONFIG = "cifar100_aper.yaml"


@torch.no_grad()
def forward_check(shared: Path) -> dict:
    vit, method = build(CONFIG, [], shared)
    g = torch.Generator().manual_seed(7)
    trained = aper_module.tune_first_task

    def instead_of_training(name, model, tuned, *args, **kwargs):
        move_away(list(tuned.parameters()), g)
        freeze(tuned)

    aper_module.tune_first_task = instead_of_training
    try:
        x_test, _ = test_images(shared)
        tasks = []
        for t, (x, y) in enumerate(task_data(shared, 8)):
            method.learn_task(t, plain_loaders(x, y))
            feats = torch.cat([TunedView(method.model, None)(x_test), TunedView(method.model, 0)(x_test)], dim=1)
            tasks.append({"images": x, "labels": y, "prototypes": method.prototypes.clone(),
                          "logits": method.logits(feats)})
    finally:
        aper_module.tune_first_task = trained
    return {"state_dict": backbone_state(vit), "tuned": state_of(method.tuned), "images": x_test,
            "features": feats, "tasks": tasks}


def training_steps(shared: Path) -> dict:
    _, method = build(CONFIG, ["method.epochs=1", "method.batch_size=20"], shared)
    x, y = three_batches(shared, TASKS[0])
    initial = state_of(method.tuned)
    with HeadRecorder() as heads:
        method.learn_task(0, TaskLoaders(batches(x, y), batches(x, y), None))
    c = method.cfg.method
    return {"images": x, "labels": y, "initial": initial, "trained": state_of(method.tuned),
            "initial_head": heads.initial[0], "trained_head": state_of(heads.heads[0]), "dropout_seed": DROPOUT_SEED,
            "opts": {"lr": c.lr, "weight_decay": c.weight_decay, "min_lr": c.min_lr, "dropout": c.adapter_dropout}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = {"forward": forward_check(args.shared), "steps": training_steps(args.shared)}
    torch.save(saved, args.out / "norga_aper.pt")
    print(f"wrote {args.out / 'norga_aper.pt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
