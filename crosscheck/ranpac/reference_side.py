"""The reference side of the RanPAC cross-check, run in the reference environment (timm 0.6.13 first on the path):

    python -m crosscheck.ranpac.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is RanPAC/RanPAC, DIR what ``python -m crosscheck.ranpac.norga_side`` wrote. Its own ``Learner``
(``RanPAC.py``) runs, with three changes made in memory (nothing on disk):

* ``inc_net.get_convnet`` returns its adapter ViT (``petl/vision_transformer_adapter.py``) built as ViT-S/14 at
  56 px with norga's backbone (``adapters_reference.adapter_vit``) instead of downloading a ViT-B;
* CUDA requests become CPU no-ops (``adapters_reference.cpu_only``);
* the forward check sets its W_rand to norga's W after its own ``setup_RP`` drew one, and feeds each task's
  images to ``replace_fc`` in the order norga's lambda split used (its split is the loader's order: first 80%).

Printed: tuned features, the lambda chosen, W_o, logits after every task and the final G and C, max |reference −
norga| (as shipped in float32, and once more with the ridge step in float64: default dtype float64, features
cast); then its ``_train`` of task 0 (its SGD over the network's parameters, its cosine schedule, its training
loop) on the three fixed batches, every trained tensor against norga's.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from crosscheck.harness.adapters_reference import (adapter_vit, load_adapters, load_head, report_steps,
                                                   run_reference_side, start_steps, steps_loaders, tuning_config)
from crosscheck.harness.reference_cli import biggest


def make_learner(ref, state, m: int, **overrides):
    """Its Learner for the official CIFAR row (csv ID 7: adapter, use_RP, M) around the ViT-S adapter backbone."""
    ref.inc_net.get_convnet = lambda args, pretrained=False: adapter_vit(
        ref.VisionTransformer, tuning_config(ref.EasyDict), state, "adaptmlp")
    args = {"model_name": "adapter", "convnet_type": "pretrained_vit_b16_224_in21k_adapter", "device": ["cpu"],
            "batch_size": 48, "tuned_epoch": 20, "body_lr": 0.01, "head_lr": 0.01, "weight_decay": 0.0005,
            "min_lr": 0.0, "use_RP": True, "M": m, **overrides}
    learner = ref.Learner(args)
    learner.is_dil, learner.dil_init, learner.total_classnum = False, False, 50
    return learner


class Float64(nn.Module):
    """A backbone whose features come out in float64 (the float64 variant of the ridge step)."""

    def __init__(self, vit):
        super().__init__()
        self.vit, self.out_dim = vit, vit.out_dim

    def forward(self, x):
        return self.vit(x).double()


def forward_check(ref, saved: dict, float64: bool) -> None:
    learner = make_learner(ref, saved["state_dict"], saved["projection"].shape[1])
    vit = learner._network.convnet
    load_adapters([b.adaptmlp for b in vit.blocks], saved["tuned"])
    record_ridges(learner)
    if float64:
        learner._network.convnet = Float64(vit)
        torch.set_default_dtype(torch.float64)
    label = "float64" if float64 else "float32, as shipped"
    x = saved["images"]
    with torch.no_grad():
        print(f"RanPAC tuned features, max |ref - norga|: {biggest(vit(x), saved['tasks'][0]['features']):.1e}")
    for t, task in enumerate(saved["tasks"]):
        learner._cur_task += 1
        learner._classes_seen_so_far = learner._known_classes + 10
        del learner._network.fc
        learner._network.fc = None
        learner._network.update_fc(learner._classes_seen_so_far)
        if t == 0:
            learner.setup_RP()  # draws its own W_rand; norga's replaces it below
            learner.W_rand = saved["projection"].to(torch.get_default_dtype())
        order = task["split_order"]
        with torch.no_grad():
            learner.replace_fc([(order, task["images"][order], task["labels"][order])])
            logits = learner._network(x)["logits"]
        seen = learner._classes_seen_so_far
        ridge = learner.chosen_ridges[-1]
        ours = task["head"].T[:seen]
        print(f"RanPAC task {t} ({label}): lambda ref {ridge:g} / norga {task['ridge']:g}; W_o max |ref - norga| "
              f"{biggest(learner._network.fc.weight.detach().double(), ours):.1e} (max |W_o| {ours.abs().max():.1e}); "
              f"logits {biggest(logits.double(), task['logits'][:, :seen].double()):.1e} "
              f"(max |logit| {task['logits'][:, :seen].abs().max():.1e}); same predictions: "
              f"{bool(torch.equal(logits.argmax(1), task['logits'].argmax(1)))}")
        learner.after_task()
    print(f"RanPAC after 5 tasks ({label}): G max |ref - norga| {biggest(learner.G.double(), saved['gram']):.1e} "
          f"(max |G| {saved['gram'].abs().max():.1e}); C {biggest(learner.Q.double(), saved['targets']):.1e} "
          f"(max |C| {saved['targets'].abs().max():.1e})")
    torch.set_default_dtype(torch.float32)


def record_ridges(learner) -> None:
    """Keep every lambda its ``optimise_ridge_parameter`` returns (it only logs them)."""
    learner.chosen_ridges = []
    original = learner.optimise_ridge_parameter

    def recorded(features, y):
        ridge = original(features, y)
        learner.chosen_ridges.append(float(ridge))
        return ridge

    learner.optimise_ridge_parameter = recorded


def training_steps(ref, saved: dict) -> None:
    steps, opts = saved["steps"], saved["steps"]["opts"]
    learner = make_learner(ref, saved["forward"]["state_dict"], 100, tuned_epoch=1, batch_size=20,
                           body_lr=opts["lr"], weight_decay=opts["weight_decay"], min_lr=opts["min_lr"])
    adapters = [b.adaptmlp for b in learner._network.convnet.blocks]
    start_steps(adapters, steps["initial"], opts["dropout"])
    learner._cur_task, learner._classes_seen_so_far = 0, 10
    learner._network.update_fc(10)  # its first-session cosine head over task 0's classes
    head = learner._network.fc
    load_head(head, steps["initial_head"])
    trained_head = {}
    setup_rp = learner.setup_RP

    def keep_head_then_setup_rp():  # its setup_RP replaces the head's weight and resets sigma: read them first
        trained_head.update(weight=head.weight.detach().clone(), sigma=head.sigma.detach().clone())
        setup_rp()

    learner.setup_RP = keep_head_then_setup_rp
    record_ridges(learner)
    loader = steps_loaders(steps["images"], steps["labels"])
    torch.manual_seed(steps["dropout_seed"])  # as norga's side: restarted right after the head was drawn
    learner._train(loader, loader[:1], loader)
    report_steps("RanPAC 3 training steps", adapters, steps, trained_head)


def namespace() -> SimpleNamespace:
    """Its classes the checks use (run with the checkout on the path, after :func:`cpu_only`)."""
    import RanPAC
    import inc_net
    from easydict import EasyDict
    from petl.vision_transformer_adapter import VisionTransformer

    RanPAC.num_workers = 0  # its data loaders' worker processes (8)
    return SimpleNamespace(Learner=RanPAC.Learner, inc_net=inc_net, EasyDict=EasyDict,
                           VisionTransformer=VisionTransformer)


def checks(ref, saved: dict) -> None:
    """The forward check as shipped (float32) and with the ridge step in float64, then the training steps."""
    for float64 in (False, True):
        forward_check(ref, saved["forward"], float64)
    training_steps(ref, saved)


def main(argv=None) -> int:
    return run_reference_side(__doc__, "RanPAC/RanPAC", "crosscheck.ranpac.norga_side", "norga_ranpac.pt",
                              namespace, checks, argv)


if __name__ == "__main__":
    raise SystemExit(main())
