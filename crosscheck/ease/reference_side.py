"""The reference side of the EASE cross-check, run in the reference environment (timm 0.6.13 first on the path):

    python -m crosscheck.ease.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is sun-hailong/CVPR24-Ease, DIR what ``python -m crosscheck.ease.norga_side`` wrote. Its own
``models/ease.py`` ``Learner`` runs, with three changes made in memory (nothing on disk):

* ``utils.inc_net.get_backbone`` returns its adapter ViT (``backbone/vit_ease.py``) built as ViT-S/14 at 56 px with
  norga's backbone (``adapters_reference.adapter_vit``) instead of downloading a ViT-B;
* ``EaseCosineLinear.forward_reweight`` gets ``out_dim=384``: ``EaseNet.forward`` leaves it at its default 768
  (ViT-B's width), which would cut ViT-S features into wrong subspaces;
* CUDA requests become CPU no-ops (``adapters_reference.cpu_only``).

Printed, after every task: the subspace features (``forward_test``), the prototypes (its ``fc.weight`` after
``replace_fc``: real ones and the ``solve_sim_reset`` complement) and the reweighted logits, max |reference −
norga|; then its ``_train`` of tasks 0 and 1 (its SGD over the trainable parameters, cosine schedule, training
loop with labels shifted to the task, ``after_task`` in between) on three fixed batches each, every trained
tensor against norga's.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from crosscheck.harness.adapters_reference import (DIM, adapter_difference, adapter_vit, load_adapters, load_head,
                                                   moved, report_steps, run_reference_side, start_steps, steps_loaders,
                                                   tuning_config)
from crosscheck.harness.reference_cli import biggest


def make_learner(ref, state, **overrides):
    """Its Learner with the values of ``exps/ease_cifar.json`` (10-class tasks here)."""
    ref.inc_net.get_backbone = lambda args, pretrained=False: adapter_vit(
        ref.VisionTransformer, tuning_config(ref.EasyDict, _device="cpu"), state, "cur_adapter")
    args = {"model_name": "ease", "backbone_type": "vit_base_patch16_224_ease", "device": ["cpu"], "memory_size": 0,
            "init_cls": 10, "increment": 10, "init_epochs": 20, "init_lr": 0.025, "later_epochs": 20,
            "later_lr": 0.025, "batch_size": 48, "weight_decay": 0.0005, "min_lr": 0, "optimizer": "sgd",
            "scheduler": "cosine", "ffn_num": 64, "use_diagonal": False, "recalc_sim": True, "alpha": 0.1,
            "use_init_ptm": False, "beta": 0, "use_old_data": False, "use_reweight": True, "moni_adam": False,
            "adapter_num": -1, **overrides}
    return ref.Learner(args)


def next_task(learner) -> None:
    """What its ``incremental_train`` does before training: the task counter, class range and heads."""
    learner._cur_task += 1
    learner._total_classes = learner._known_classes + 10
    learner._network.update_fc(learner._total_classes)


def forward_check(ref, saved: dict) -> None:
    learner = make_learner(ref, saved["state_dict"])
    x = saved["images"]
    for t, task in enumerate(saved["tasks"]):
        next_task(learner)
        load_adapters(learner._network.backbone.cur_adapter, saved["tuned"], subspace=t)
        learner.train_dataset_for_protonet = SimpleNamespace(labels=task["labels"].numpy())
        with torch.no_grad():
            learner.replace_fc([(None, task["images"], task["labels"])])
            feats = learner._network.backbone(x, True).view(len(x), t + 1, DIM)
            logits = learner._network(x, test=True)["logits"]
        seen = learner._total_classes
        protos = learner._network.fc.weight.detach().view(seen, t + 1, DIM)
        ours = task["logits"][:, :seen]
        print(f"EASE task {t}: subspace features max |ref - norga| {biggest(feats, task['features']):.1e}; "
              f"prototypes: real {biggest(protos[-10:], task['prototypes'][seen - 10:seen, :t + 1]):.1e}, "
              f"complemented {biggest(protos[:-10], task['prototypes'][:seen - 10, :t + 1]) if t else 0.0:.1e}; "
              f"reweighted logits {biggest(logits, ours):.1e}; same predictions: "
              f"{bool(torch.equal(logits.argmax(1), ours.argmax(1)))}")
        learner.after_task()


def training_steps(ref, saved: dict) -> None:
    steps, opts = saved["steps"], saved["steps"]["opts"]
    learner = make_learner(ref, saved["forward"]["state_dict"], init_epochs=1, later_epochs=1, batch_size=20,
                           init_lr=opts["lr"], later_lr=opts["lr"], weight_decay=opts["weight_decay"],
                           min_lr=opts["min_lr"])
    for t, task in enumerate(steps["tasks"]):
        next_task(learner)
        adapters = learner._network.backbone.cur_adapter
        start_steps(adapters, task["initial"], opts["dropout"], subspace=t)
        head = learner._network.proxy_fc  # its training head over the task's classes
        load_head(head, task["initial_head"])
        loader = steps_loaders(task["images"], task["labels"])
        torch.manual_seed(steps["dropout_seed"])  # as norga's side: restarted right after the head was drawn
        learner._train(loader, loader[:1])
        report_steps(f"EASE task {t}, 3 training steps", adapters, task,
                     {n: getattr(head, n).detach() for n in ("weight", "sigma")}, t, f"adapters {t}")
        for k, old in enumerate(learner._network.backbone.adapter_list):
            print(f"EASE task {t}, adapters {k} (frozen): max |ref - norga| "
                  f"{adapter_difference(old, task['trained'], k):.1e}; norga's moved "
                  f"{moved(steps['tasks'][k]['trained'], task['trained'], k):.1e} since task {k}")
        learner.after_task()


def namespace() -> SimpleNamespace:
    """Its classes the checks use (run with the checkout on the path, after :func:`cpu_only`), with
    ``forward_reweight`` given ViT-S's width."""
    import models.ease as ease
    import utils.inc_net as inc_net
    from backbone.linears import CosineLinear
    from backbone.vit_ease import VisionTransformer
    from easydict import EasyDict

    reweight = CosineLinear.forward_reweight
    CosineLinear.forward_reweight = lambda self, x, **kwargs: reweight(self, x, **{**kwargs, "out_dim": DIM})
    ease.num_workers = 0  # its data loaders' worker processes (8)
    return SimpleNamespace(Learner=ease.Learner, inc_net=inc_net, EasyDict=EasyDict,
                           VisionTransformer=VisionTransformer)


def checks(ref, saved: dict) -> None:
    forward_check(ref, saved["forward"])
    training_steps(ref, saved)


def main(argv=None) -> int:
    return run_reference_side(__doc__, "sun-hailong/CVPR24-Ease", "crosscheck.ease.norga_side",
                              "norga_ease.pt", namespace, checks, argv)


if __name__ == "__main__":
    raise SystemExit(main())
