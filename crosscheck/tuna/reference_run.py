"""A whole run of the TUNA authors' code on the cross-check's small task (reference environment, timm 0.6.13):

    python -m crosscheck.tuna.reference_run --ref CHECKOUT --saved DIR --data runs/crosscheck/cifar50_small.npz \\
        --seed 1993 --out DIR/ref_tuna_s1993.json

CHECKOUT is the TUNA authors' code (the fork Ngahoang2005/ICCV2025-TUNA at 77d4f10), DIR what ``python -m
crosscheck.tuna.norga_side`` wrote (the converted DINOv2 ViT-S/14 at 56 px), the .npz what ``python -m
crosscheck.harness.small_task`` wrote. Its ``models/tuna.py`` ``Learner`` is built by its own ``__init__`` and runs its
trainer's loop: ``incremental_train`` (adapter training, snapshot, merge, class statistics, classifier alignment),
``_eval_cnn`` on each learned task's test images, ``after_task``, for 5 tasks of 10 classes, with the values of
``configs/crosscheck/tuna.yaml`` (its ``exps/tuna_cifar.json`` except 5 epochs and batch 20). Its data manager is
replaced by ``pilot_runs_reference.SmallTask`` (its DataManager's class order for the seed, its CIFAR transforms
at 56 px). Changes in memory, none in its files: its ``get_backbone`` (which would build a ViT-B/16 and load its
weights) returns ``tuna_reference_side.build_vit``'s ViT-S/14 at 56 px with norga's converted weights; its
``TUNANet`` sets ``out_dim`` 768 (ViT-B's width), set to 384 after construction; its data loaders run without
worker processes (module-level ``num_workers`` 8 and the ``num_workers=4`` of ``_compute_mean``). The generator
is seeded as its trainer's ``_set_random`` does (``torch.manual_seed(seed)`` before the data manager and the
learner). Writes the accuracy matrix (fractions; row t = after task t) and the class order to --out.

The initial-tensor swap (docs/crosscheck.md, TUNA): ``--init-out FILE`` writes the adapter and head its first
task starts from (its own draws for the seed, in norga's naming: ``crosscheck.tuna.first_task_init``); ``--init-in
FILE`` starts its first task from FILE's tensors instead, copied over its own draws after they were made, so
every later draw of its stream (shuffles, augmentation, dropout, sampling) stays as in the plain run.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch

from crosscheck.harness.pilot_runs_reference import SmallTask, accuracy_matrix
from crosscheck.harness.reference_cli import reference_args, run_options, without_workers
from crosscheck.tuna.first_task_init import exchange_first_task_init
from crosscheck.tuna.reference_side import build_vit

REFERENCE_NAMES = {"down": "down_proj", "up": "up_proj"}  # its Adapter's layer names for norga's

# exps/tuna_cifar.json as shipped, except tuned_epoch 15 -> 5 and batch_size 16 -> 20 (the small task's protocol)
ARGS = {"memory_size": 0, "memory_per_class": 0, "fixed_memory": False, "device": ["cpu"], "tuned_epoch": 5,
        "init_lr": 0.01, "batch_size": 20, "weight_decay": 0.0005, "min_lr": 0, "optimizer": "sgd",
        "scheduler": "cosine", "reinit_optimizer": True, "init_milestones": [10], "init_lr_decay": 0.1, "reg": 0.001,
        "use_orth": False, "crct_epochs": 30, "ca_lr": 0.005, "ca_storage_efficient_method": "covariance",
        "decay": False, "drop": 0.0, "drop_path": 0.0, "r": 16, "scale": 20.0, "m": 0.0}


def make_learner(weights: dict):
    """Its ``Learner(args)``, with its ``get_backbone`` returning the ViT-S/14 at 56 px (norga's weights)."""
    from easydict import EasyDict
    import backbone.vit_tuna as vit_tuna
    import models.tuna as tuna
    import utils.inc_net as inc_net

    without_workers(tuna)
    vit = build_vit(vit_tuna, EasyDict, weights)
    inc_net.get_backbone = lambda args, pretrained=False: vit
    learner = tuna.Learner(dict(ARGS))
    learner._network.backbone.out_dim = vit.embed_dim  # its TUNANet hard-codes 768
    return learner


def swap_options(p) -> None:
    run_options(p)
    p.add_argument("--init-out", type=Path, help="write the first task's initial adapter and head here")
    p.add_argument("--init-in", type=Path, help="start the first task from these initial tensors")


def hook_first_task(learner, init_in, init_out) -> None:
    """Wrap its ``TUNANet.update_fc`` so that right after the first task's head is drawn the initial ``cur_adapter``
    and head are written to ``init_out`` and/or replaced by ``init_in``'s (both in norga's naming)."""
    net, original = learner._network, learner._network.update_fc

    def update_fc(nb_classes, *rest):
        first = net.fc is None
        original(nb_classes, *rest)
        if first:
            exchange_first_task_init(REFERENCE_NAMES, net.backbone.cur_adapter, net.fc.heads[0][0].weight,
                                     init_in, init_out)

    net.update_fc = update_fc


def main(argv=None) -> int:
    args = reference_args(__doc__, "Ngahoang2005/ICCV2025-TUNA @ 77d4f10", "crosscheck.tuna.norga_side", argv,
                          swap_options)
    logging.disable(logging.INFO)
    saved = torch.load(args.saved / "tuna_norga.pt", weights_only=False)
    torch.manual_seed(args.seed)  # its trainer's _set_random, before the data manager and the learner
    data = SmallTask(args.data, args.seed)
    learner = make_learner(saved["backbone"])
    hook_first_task(learner, args.init_in, args.init_out)
    matrix = [[a / 100 for a in row] for row in accuracy_matrix(learner, data)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seed": args.seed, "order": data.order, "acc_matrix": matrix}) + "\n")
    print(f"FA {100 * np.mean(matrix[-1]):.1f} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
