"""The reference side of the SD-LoRA cross-check, run with the shared venv (timm 1.x, as its requirements pin):

    python -m crosscheck.sd_lora.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is WuYichen-97/SD-Lora-CL, DIR what ``python -m crosscheck.sd_lora.norga_side`` wrote. Its model is
its own ``LoRA_ViT_timm`` wrapped around timm's ViT (the reference adapts timm's model, not a copy of its own),
here timm's DINOv2 ViT-S/14 at 56 px with norga's converted weights (strict load) instead of the ViT-B/16 its
``update_network`` downloads. Nothing is patched on disk; in memory:

* ``einops`` (imported by ``backbone/lora.py``, never used) is an empty module;
* ``.cuda()`` of modules and tensors returns them unchanged (CPU);
* ``torch.load`` reads with ``weights_only=False``: its saved components are pickled lists of ``nn.Linear``, which
  torch >= 2.6 refuses by default;
* its ``Learner.update_network`` (called at every task after the first) returns the LoRA model around a fresh
  converted ViT-S/14 with the task's initial A from norga's side; earlier components come from its own files.

Printed (max |reference - norga|): features and logits after 1 and 3 tasks' components, and, after its own
``Learner._train`` on the same fixed batches (task 0, then task 1), every trained tensor.
"""
from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import types
from functools import partial
from pathlib import Path

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args

RANK, CLASSES = 10, 10


def patch_for_cpu() -> None:
    einops = types.ModuleType("einops")
    einops.rearrange = None
    sys.modules.setdefault("einops", einops)
    nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.load = partial(torch.load, weights_only=False)


def fresh_vit(state_dict: dict):
    import timm

    vit = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0, img_size=56)
    vit.load_state_dict(state_dict, strict=True)
    return vit.eval()


def blocks_of(lora) -> int:
    return len(lora.w_As) // 2


def set_component(lora, branches: dict, task: int, down_only: bool = False) -> None:
    """Its current component (w_As / w_Bs: q then v of every block) <- norga's component ``task``."""
    with torch.no_grad():
        for j in range(blocks_of(lora)):
            branch = branches[str(j)][task]
            for p in (0, 1):
                lora.w_As[2 * j + p].weight.copy_(branch["down"][p])
                if not down_only:
                    lora.w_Bs[2 * j + p].weight.copy_(branch["up"][p])


def save_component(folder: str, branches: dict, task: int) -> None:
    """Component ``task`` as its own files lora_w_a_<task>.pt / lora_w_b_<task>.pt (lists of nn.Linear)."""
    downs, ups = [], []
    for j in range(len(branches)):
        for p in (0, 1):
            a, b = nn.Linear(384, RANK, bias=False), nn.Linear(RANK, 384, bias=False)
            a.weight.data.copy_(branches[str(j)][task]["down"][p])
            b.weight.data.copy_(branches[str(j)][task]["up"][p])
            downs.append(a)
            ups.append(b)
    torch.save(downs, f"{folder}lora_w_a_{task}.pt")
    torch.save(ups, f"{folder}lora_w_b_{task}.pt")


def lora_model(ref: dict, state_dict: dict, folder: str, task: int):
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its file prefix
        model = ref["LoRA_ViT_timm"](vit_model=fresh_vit(state_dict), r=RANK, num_classes=CLASSES, index=False,
                                     increment=CLASSES, filepath=folder, cur_task_index=task)
    model.out_dim = 384
    return model


def simple_linear(ref: dict, head: dict, classes: int):
    fc = ref["SimpleLinear"](384, classes)
    fc.weight.data.copy_(head["weight"][:classes])
    fc.bias.data.copy_(head["bias"][:classes])
    return fc


@torch.no_grad()
def forward_check(ref: dict, saved: dict, folder: str) -> None:
    x = saved["images"]
    for learned, ours in saved["after"].items():
        for task in range(learned - 1):
            save_component(folder, ours["branches"], task)
        lora = lora_model(ref, saved["state_dict"], folder, learned - 1)
        set_component(lora, ours["branches"], learned - 1)
        for i, value in enumerate(ours["magnitudes"][:-1]):
            lora.wrapped_param_prev[i].param.fill_(value)
        lora.wrapped_param[0].param.fill_(ours["magnitudes"][-1])
        features = lora(x)
        logits = simple_linear(ref, saved["head"], CLASSES * learned)(features)["logits"]
        print(f"SD-LoRA forward after {learned} task(s): features {biggest(features, ours['features']):.1e} (the "
              f"components move them by {biggest(ours['features'], saved['frozen']):.1f}); logits "
              f"{biggest(logits, ours['logits']):.1e}")


def network(ref: dict, backbone):
    net = ref["IncrementalNet"].__new__(ref["IncrementalNet"])
    nn.Module.__init__(net)
    net.backbone, net.fc, net._device, net.model_type, net.gradcam = backbone, None, "cpu", "vit", False
    return net


def training_steps(ref: dict, saved: dict, folder: str) -> None:
    steps, state = saved["steps"], saved["forward"]["state_dict"]
    learner = ref["Learner"].__new__(ref["Learner"])
    args = {"init_lr": 8e-3, "lrate": 8e-3, "init_milestones": [60, 120, 170], "milestones": [40, 70],
            "init_lr_decay": 0.1, "lrate_decay": 0, "init_epoch": 1, "epochs": 1, "filepath": folder,
            "increment": CLASSES}
    learner.__dict__.update(args=args, _cur_task=-1, _known_classes=0, _total_classes=0, _device="cpu",
                            _multiple_gpus=["cpu"])

    def update_network(index=True):  # its own, but around the converted ViT-S/14 and norga's initial A
        model = lora_model(ref, state, folder, learner._cur_task)
        branches = {key: [None] * learner._cur_task + [{"down": down}] for key, down in
                    steps["tasks"][learner._cur_task]["initial_down"].items()}
        set_component(model, branches, learner._cur_task, down_only=True)
        return model

    learner.update_network = update_network
    learner._cur_task = 0
    learner._network = network(ref, update_network())
    for t, ours in enumerate(steps["tasks"]):
        learner._cur_task, learner._total_classes = t, CLASSES * (t + 1)  # its incremental_train
        learner._network.update_fc(learner._total_classes)
        new = slice(CLASSES * t, CLASSES * (t + 1))
        learner._network.fc.weight.data[new] = steps["initial_head"]["weight"][new]
        learner._network.fc.bias.data[new] = steps["initial_head"]["bias"][new]
        loader = [(None, x, y) for x, y in ours["batches"]]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            learner._train(loader, loader[:1])  # its loop prints a progress bar and a test accuracy
        lora = learner._network.backbone
        a_gap = b_gap = moved_a = moved_b = 0.0
        for j in range(blocks_of(lora)):
            branch = ours["branches"][str(j)][t]
            for p in (0, 1):
                a_gap = max(a_gap, biggest(lora.w_As[2 * j + p].weight.detach(), branch["down"][p]))
                b_gap = max(b_gap, biggest(lora.w_Bs[2 * j + p].weight.detach(), branch["up"][p]))
                moved_a = max(moved_a, biggest(branch["down"][p], ours["initial_down"][str(j)][p]))
                moved_b = max(moved_b, float(branch["up"][p].abs().max()))
        theirs = [float(lora.wrapped_param_prev[i].param.detach()) for i in range(t)]
        theirs.append(float(lora.wrapped_param[0].param.detach()))
        alpha_gap = max(abs(a - b) for a, b in zip(theirs, ours["magnitudes"]))
        alpha_moved = max(abs(a - 0.8) for a in ours["magnitudes"])
        head = learner._network.fc.weight.detach()
        head_gap = biggest(head, ours["head"]["weight"][:CLASSES * (t + 1)])
        head_moved = biggest(ours["head"]["weight"], steps["initial_head"]["weight"])
        print(f"SD-LoRA _train of task {t} (3 fixed batches): A {a_gap:.1e} (moved {moved_a:.1e}); B {b_gap:.1e} "
              f"(moved {moved_b:.1e}); magnitudes {alpha_gap:.1e} (moved {alpha_moved:.1e}: norga "
              f"{[round(a, 5) for a in ours['magnitudes']]}); head {head_gap:.1e} (moved {head_moved:.1e})")
        learner._known_classes = learner._total_classes  # its after_task


def main(argv=None) -> int:
    args = reference_args(__doc__, "WuYichen-97/SD-Lora-CL", "crosscheck.sd_lora.norga_side", argv)
    patch_for_cpu()
    from backbone.linears import SimpleLinear
    from backbone.lora import LoRA_ViT_timm
    from models.sdlora import Learner
    from utils.inc_net import IncrementalNet

    ref = {"LoRA_ViT_timm": LoRA_ViT_timm, "SimpleLinear": SimpleLinear, "Learner": Learner,
           "IncrementalNet": IncrementalNet}
    saved = torch.load(args.saved / "norga_sd_lora.pt")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("forward", "steps"):
            (Path(tmp) / name).mkdir()
        forward_check(ref, saved["forward"], f"{tmp}/forward/")  # it joins its file names to this prefix
        training_steps(ref, saved, f"{tmp}/steps/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
