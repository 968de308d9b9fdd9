"""The reference MOS on the cross-check's small task, run with a reference environment (timm 0.6.7):

    python -m crosscheck.mos.reference_run --ref CHECKOUT --saved DIR --data NPZ --seed S --out FILE.json

CHECKOUT is sun-hailong/AAAI25-MOS, DIR what ``python -m crosscheck.mos.norga_side`` wrote (the converted
DINOv2 ViT-S/14 at 56 px), NPZ what ``python -m crosscheck.harness.small_task`` wrote. Its ``models/mos.py`` Learner
runs its own ``incremental_train``, ``_eval_cnn`` (once per task, as its trainer's ``eval_task``) and
``after_task`` for 5 tasks of 10 classes, with the values of ``configs/crosscheck/mos.yaml`` (its CIFAR json except
5 epochs and batch 20). Around it, this script supplies what its trainer and data manager would: the backbone of
``mos_reference_side.build_vit`` with a timm-style head (N(0, 0.02^2), bias 0, as its checkpoint model's), the
small task's images with the class order norga draws for the seed (``random.Random(seed).shuffle``), labels
renumbered in that order (as its DataManager does), norga's ``cifar`` transforms. CPU patches, in memory: its
module-level ``num_workers`` (8) and the ``num_workers=4`` of ``_compute_mean`` set to 0. Writes the accuracy
matrix (row = after task t, column = task) and FA (%).
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from crosscheck.mos.reference_side import build_vit
from crosscheck.harness.reference_cli import reference_args, run_options, without_workers, write_result

TASKS, PER_TASK = 5, 10
ARGS = {"init_lr": 0.03, "batch_size": 20, "weight_decay": 0.0005, "min_lr": 0, "optimizer": "sgd",
        "scheduler": "cosine", "tuned_epoch": 5, "reg": 0.1, "adapter_momentum": 0.1, "ensemble": True,
        "crct_epochs": 30, "ca_lr": 0.005, "ca_storage_efficient_method": "covariance", "n_centroids": 10}


class Images(Dataset):
    def __init__(self, x, y, transform):
        self.x, self.labels, self.transform = x, y, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return i, self.transform(Image.fromarray(self.x[i])), int(self.labels[i])


class SmallTask:
    """The part of its DataManager the Learner calls, over the small task's arrays."""

    def __init__(self, npz: Path, seed: int, recipe):
        data, order = np.load(npz), list(range(TASKS * PER_TASK))
        random.Random(seed).shuffle(order)
        rank = np.argsort(order)  # original class -> position in the order
        self.x = {s: data[f"{s}_x"] for s in ("train", "test")}
        self.y = {s: rank[data[f"{s}_y"].astype(np.int64)] for s in ("train", "test")}
        self.transforms = {"train": recipe(56, True), "test": recipe(56, False)}

    def get_task_size(self, task: int) -> int:
        return PER_TASK

    def get_dataset(self, indices, source, mode, ret_data=False):
        keep = np.isin(self.y[source], indices)
        ds = Images(self.x[source][keep], self.y[source][keep], self.transforms[mode])
        return (ds.x, ds.labels, ds) if ret_data else ds


def learner(ref: dict, state: dict):
    vit = build_vit(ref["vit_mos"], state)
    for a in vit.cur_adapter:
        a.dropout = 0.1  # build_vit switches dropout off for the equality checks; a run keeps the code's 0.1
    with torch.no_grad():
        vit.head.weight.normal_(0, 0.02).clamp_(-2, 2)
        vit.head.bias.zero_()
    net = ref["MOSNet"].__new__(ref["MOSNet"])
    torch.nn.Module.__init__(net)
    net.backbone, net._device, net.fc = vit, "cpu", None
    me = ref["Learner"].__new__(ref["Learner"])
    me._network, me._device, me._multiple_gpus, me.topk, me.args = net, "cpu", [], 1, dict(ARGS)
    me._cur_task, me._known_classes, me._total_classes = -1, 0, 0
    me.cls_mean, me.cls_cov, me.cls2task = {}, {}, {}
    me.batch_size, me.init_lr = ARGS["batch_size"], ARGS["init_lr"]
    me.ca_lr, me.crct_epochs = ARGS["ca_lr"], ARGS["crct_epochs"]
    me.weight_decay, me.min_lr, me.ensemble = ARGS["weight_decay"], ARGS["min_lr"], ARGS["ensemble"]
    return me


def run(ref: dict, state: dict, data: SmallTask) -> dict:
    me = learner(ref, state)
    matrix = []
    for task in range(TASKS):
        me.incremental_train(data)
        pred, true = me._eval_cnn(me.test_loader)
        correct = pred[:, 0] == true
        matrix.append([float(correct[true // PER_TASK == t].mean()) for t in range(task + 1)])
        me.after_task()
        print(f"task {task}: accuracy per task {[round(a * 100, 1) for a in matrix[-1]]}", flush=True)
    return {"matrix": matrix, "FA": 100 * float(np.mean(matrix[-1]))}


def main(argv=None) -> int:
    args = reference_args(__doc__, "sun-hailong/AAAI25-MOS", "crosscheck.mos.norga_side", argv, run_options)
    import logging

    logging.disable(logging.INFO)
    import models.mos as mos_module
    from backbone import vit_mos
    from models.mos import Learner
    from utils.inc_net import MOSNet

    from norga.data.transforms import cifar_recipe

    without_workers(mos_module)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    state = torch.load(args.saved / "norga_mos.pt", weights_only=False)["forward"]["state_dict"]
    result = run({"vit_mos": vit_mos, "Learner": Learner, "MOSNet": MOSNet}, state,
                 SmallTask(args.data, args.seed, cifar_recipe))
    write_result(args.out, {"seed": args.seed, **result})
    print(f"FA {result['FA']:.1f} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
