"""The reference side of the APER cross-check, run in the reference environment (timm 0.6.13 first on the path):

    python -m crosscheck.aper.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is zhoudw-zdw/RevisitingCIL (the authors' APER code), DIR what ``python -m crosscheck.aper.norga_side``
wrote. Its own ``models/aper_adapter.py`` ``Learner`` runs, with two changes made in memory (nothing on disk):

* ``utils.inc_net.get_convnet`` returns, for the adapter backbone, its adapter ViT
  (``convs/vision_transformer_adapter.py``) built as ViT-S/14 at 56 px with norga's backbone
  (``adapters_reference.adapter_vit``) and, for the plain one its dual-branch network asks for, timm's
  VisionTransformer as DINOv2 ViT-S/14 with the same weights, instead of downloading ViT-Bs;
* CUDA requests become CPU no-ops (``adapters_reference.cpu_only``).

Printed: the [frozen, adapted] features, the prototypes (its ``fc.weight`` after ``replace_fc``) and the logits
after every task, max |reference − norga|; then its ``_train`` of task 0 (its SGD over the network's parameters,
cosine schedule and training loop, then its dual-branch network and prototypes) on the three fixed batches, every
trained tensor against norga's.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from crosscheck.harness.adapters_reference import (adapter_vit, frozen_timm_vit, load_adapters, load_head,
                                                   report_steps, run_reference_side, start_steps, steps_loaders,
                                                   tuning_config)
from crosscheck.harness.reference_cli import biggest


def make_learner(ref, state, **overrides):
    """Its Learner with the values of ``exps/aper_adapter/cifar224_5_5_vit-b_adapter.json`` (10-class tasks)."""
    def get_convnet(args, pretrained=False):
        if "_adapter" in args["convnet_type"]:
            return adapter_vit(ref.VisionTransformer, tuning_config(ref.EasyDict), state, "adaptmlp")
        return frozen_timm_vit(ref.timm, state)

    ref.inc_net.get_convnet = get_convnet
    args = {"model_name": "aper_adapter", "convnet_type": "pretrained_vit_b16_224_in21k_adapter", "device": ["cpu"],
            "memory_size": 0, "init_cls": 10, "increment": 10, "ffn_num": 64, "optimizer": "sgd", "tuned_epoch": 20,
            "init_lr": 0.01, "batch_size": 48, "weight_decay": 0.0005, "min_lr": 0, **overrides}
    return ref.Learner(args)


def forward_check(ref, saved: dict) -> None:
    learner = make_learner(ref, saved["state_dict"])
    load_adapters([b.adaptmlp for b in learner._network.convnet.blocks], saved["tuned"])
    x = saved["images"]
    for t, task in enumerate(saved["tasks"]):
        learner._cur_task += 1
        learner._total_classes = learner._known_classes + 10
        learner._network.update_fc(learner._total_classes)
        learner.train_dataset = SimpleNamespace(labels=task["labels"].numpy())
        if t == 0:
            learner.construct_dual_branch_network()  # where its _train goes after tuning
        with torch.no_grad():
            learner.replace_fc([(None, task["images"], task["labels"])], learner._network, None)
            out = learner._network(x)
        seen = learner._total_classes
        if t == 0:
            print("APER [frozen, adapted] features, max |ref - norga|: "
                  f"{biggest(out['features'], saved['features']):.1e}")
        logits, ours = out["logits"], task["logits"][:, :seen]
        print(f"APER task {t}: prototypes max |ref - norga| "
              f"{biggest(learner._network.fc.weight.detach(), task['prototypes'][:seen]):.1e}; logits "
              f"{biggest(logits, ours):.1e}; same predictions: {bool(torch.equal(logits.argmax(1), ours.argmax(1)))}")
        learner.after_task()


def training_steps(ref, saved: dict) -> None:
    steps, opts = saved["steps"], saved["steps"]["opts"]
    learner = make_learner(ref, saved["forward"]["state_dict"], tuned_epoch=1, batch_size=20, init_lr=opts["lr"],
                           weight_decay=opts["weight_decay"], min_lr=opts["min_lr"])
    adapters = [b.adaptmlp for b in learner._network.convnet.blocks]
    start_steps(adapters, steps["initial"], opts["dropout"])
    learner._cur_task, learner._total_classes = 0, 10
    learner._network.update_fc(10)  # its training head: a cosine classifier over task 0's classes
    head = learner._network.fc
    load_head(head, steps["initial_head"])
    learner.train_dataset = SimpleNamespace(labels=np.arange(10))
    loader = steps_loaders(steps["images"], steps["labels"])
    torch.manual_seed(steps["dropout_seed"])  # as norga's side: restarted right after the head was drawn
    learner._train(loader, loader[:1], loader)
    report_steps("APER 3 training steps", adapters, steps, {n: getattr(head, n).detach() for n in ("weight", "sigma")})


def namespace() -> SimpleNamespace:
    """Its classes the checks use (run with the checkout on the path, after :func:`cpu_only`)."""
    import timm
    import models.aper_adapter as aper_adapter
    import utils.inc_net as inc_net
    from convs.vision_transformer_adapter import VisionTransformer
    from easydict import EasyDict

    aper_adapter.num_workers = 0  # its data loaders' worker processes (8)
    return SimpleNamespace(Learner=aper_adapter.Learner, inc_net=inc_net, EasyDict=EasyDict,
                           VisionTransformer=VisionTransformer, timm=timm)


def checks(ref, saved: dict) -> None:
    forward_check(ref, saved["forward"])
    training_steps(ref, saved)


def main(argv=None) -> int:
    return run_reference_side(__doc__, "zhoudw-zdw/RevisitingCIL", "crosscheck.aper.norga_side",
                              "norga_aper.pt", namespace, checks, argv)


if __name__ == "__main__":
    raise SystemExit(main())
