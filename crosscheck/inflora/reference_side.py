"""The reference side of the InfLoRA cross-check, run with the reference code's environment (timm 0.6.7):

    python -m crosscheck.inflora.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is liangyanshuo/InfLoRA, DIR what ``python -m crosscheck.inflora.norga_side`` wrote. Nothing of the
reference is patched on disk; in memory:

* ``ipdb`` (imported by its ``methods/inflora.py``, never called) is an empty module;
* its ``update_DualGPM`` receives its representation matrices as numpy arrays: it calls ``np.linalg.svd`` on the
  torch tensors it collects, which numpy 1.23 / torch 1.10 (its environment) answered with arrays but numpy 2 /
  torch 2.14 answer with a tensor, whose ``transpose()`` then fails; the arrays hold the same float32 values;
* its ``SiNet`` is assembled around its own ``ViT_lora_co`` built as ViT-S/14 at 56 px with layer scale (as
  DINOv2), 5 tasks, rank 10, given norga's converted backbone (only its LoRA, head and unused ``*_grow`` keys
  missing) instead of
  downloading a ViT-B/16; its per-task classifiers are cut from norga's head.

Printed (max |reference - norga|): features and logits after 1, 3 and 5 tasks' branches, the representation
matrices its ``get_cur_feat`` pass records, the DualGPM memory its ``update_DualGPM`` keeps given norga's
representation matrices (dimension, kind and projector per block), and, after its own ``_train`` on the same
fixed batches (task 0, then task 1), the designed A, the trained B, the head and the memory.
"""
from __future__ import annotations

import contextlib
import io
import sys
import types
from functools import partial

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args

TASKS, RANK, CLASSES = 5, 10, 10


def sinet(ref: dict, state_dict: dict, head: dict):
    """Its SiNet around its ViT_lora_co (ViT-S/14, 56 px, layer scale) with the converted weights and ``head``'s
    rows as its per-task classifiers."""
    encoder = ref["ViT_lora_co"](img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, init_values=1e-5,
                                 norm_layer=partial(nn.LayerNorm, eps=1e-6), n_tasks=TASKS, rank=RANK)
    missing, unexpected = encoder.load_state_dict(state_dict, strict=False)
    missing = [k for k in missing
               if not k.startswith(("head.", "cls_token_grow", "pos_embed_grow")) and ".lora_" not in k]
    assert not missing and not unexpected, (missing, unexpected)
    for module in encoder.modules():
        if isinstance(module, ref["Attention_LoRA"]):
            module.init_param()  # as its InfLoRA.__init__ does
    net = ref["SiNet"].__new__(ref["SiNet"])
    nn.Module.__init__(net)
    net.image_encoder, net.class_num, net.numtask = encoder.eval(), CLASSES, 0
    net.classifier_pool = nn.ModuleList([nn.Linear(384, CLASSES) for _ in range(TASKS)])
    net.classifier_pool_backup = nn.ModuleList([nn.Linear(384, CLASSES) for _ in range(TASKS)])
    with torch.no_grad():
        for t, linear in enumerate(net.classifier_pool):
            linear.weight.copy_(head["weight"][CLASSES * t:CLASSES * (t + 1)])
            linear.bias.copy_(head["bias"][CLASSES * t:CLASSES * (t + 1)])
    return net


def attentions(ref: dict, net) -> list:
    return [m for m in net.modules() if isinstance(m, ref["Attention_LoRA"])]


def learner(ref: dict, net, thresholds=(0.95, 1.0)):
    """Its InfLoRA learner around ``net`` with the official Adam recipe, 2 epochs per task, 5 tasks."""
    out = ref["InfLoRA"].__new__(ref["InfLoRA"])
    out.__dict__.update(_network=net, _device="cpu", _multiple_gpus=["cpu"], _cur_task=-1, _known_classes=0,
                        optim="adam", init_lr=5e-4, lrate=5e-4, init_weight_decay=0.0, weight_decay=0.0, init_epoch=2,
                        epochs=2, lamb=thresholds[0], lame=thresholds[1], total_sessions=TASKS, feature_list=[],
                        project_type=[], debug=False)
    dual_gpm = ref["InfLoRA"].update_DualGPM  # its matrices as numpy arrays, as numpy 1.x returned them (docstring)
    out.update_DualGPM = lambda mats: dual_gpm(out, [torch.as_tensor(m).numpy() for m in mats])
    return out


def projector_gap(reference_basis, norga_basis) -> float:
    ref = torch.as_tensor(reference_basis, dtype=torch.float64)
    return biggest(ref @ ref.T, norga_basis.double() @ norga_basis.double().T)


def memory_gap(learner_, memory: dict) -> str:
    """Dimensions and kinds equal? and max |F F^T - M M^T| over the blocks."""
    same = all(learner_.feature_list[i].shape[1] == memory[str(i)][0].shape[1]
               and learner_.project_type[i] == memory[str(i)][1] for i in range(len(learner_.feature_list)))
    gap = max(projector_gap(learner_.feature_list[i], memory[str(i)][0]) for i in range(len(learner_.feature_list)))
    dims = sorted({int(memory[str(i)][0].shape[1]) for i in range(len(learner_.feature_list))})
    kinds = sorted({memory[str(i)][1] for i in range(len(learner_.feature_list))})
    return f"same dims and kinds: {same} (dims {dims[0]}-{dims[-1]}, {'/'.join(kinds)}); projectors {gap:.1e}"


@torch.no_grad()
def forward_check(ref: dict, saved: dict) -> None:
    net = sinet(ref, saved["state_dict"], saved["head"])
    for i, module in enumerate(attentions(ref, net)):
        for t, branch in enumerate(saved["branches"][str(i)]):
            module.lora_A_k[t].weight.copy_(branch["down"][0])
            module.lora_A_v[t].weight.copy_(branch["down"][1])
            module.lora_B_k[t].weight.copy_(branch["up"][0])
            module.lora_B_v[t].weight.copy_(branch["up"][1])
    x = saved["images"]
    for learned, ours in saved["after"].items():
        net.numtask = learned
        features = net.image_encoder(x, task_id=learned - 1)[0][:, 0]
        print(f"InfLoRA forward after {learned} task(s): features {biggest(features, ours['features']):.1e} (the "
              f"branches move them by {biggest(ours['features'], saved['frozen']):.1f}); logits "
              f"{biggest(net.interface(x), ours['logits']):.1e}")
    for half in (x[:8], x[8:]):
        net(half, get_cur_feat=True)
    gap = max(biggest(m.cur_matrix.double(), saved["representation"][str(i)])
              for i, m in enumerate(attentions(ref, net)))
    scale = max(float(m.abs().max()) for m in saved["representation"].values())
    print(f"InfLoRA representation matrices (its get_cur_feat running mean): {gap:.1e} (entries up to {scale:.0f})")


@torch.no_grad()
def memory_check(ref: dict, saved: dict) -> None:
    for name in ("official", "high"):
        run = saved[name]
        guy = learner(ref, None, run["thresholds"])
        for t, mats in enumerate(saved["matrices"]):
            guy._cur_task = t
            with contextlib.redirect_stdout(io.StringIO()):
                guy.update_DualGPM([mats[str(i)].float() for i in range(len(mats))])  # float32, as it records them
            print(f"InfLoRA DualGPM ({name} thresholds {run['thresholds']}) after task {t}: "
                  f"{memory_gap(guy, run['memory'][t])}")


def sign_aligned(ours, theirs):
    """``theirs`` (r, D) with each row's sign flipped where that brings it closer to ``ours`` (SVD signs are free);
    returns it and the signs (r,)."""
    signs = torch.where((ours * theirs).sum(1) >= 0, 1.0, -1.0)
    return theirs * signs[:, None], signs


def training_steps(ref: dict, saved: dict) -> None:
    steps = saved["steps"]
    net = sinet(ref, saved["forward"]["state_dict"], steps["initial_head"])
    guy = learner(ref, net)
    for t, ours in enumerate(steps["tasks"]):
        net.numtask, guy._cur_task = t + 1, t  # its incremental_train: update_fc, then _train
        loader = [(None, x, y) for x, y in ours["batches"]]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            guy._train(loader, None)
        a_gap = b_gap = kv_gap = moved = 0.0
        flips = 0
        for i, module in enumerate(attentions(ref, net)):
            branch = ours["branches"][str(i)][t]
            a_k, signs = sign_aligned(branch["down"][0], module.lora_A_k[t].weight.detach())
            flips += int((signs < 0).sum())
            kv_gap = max(kv_gap, biggest(module.lora_A_k[t].weight, module.lora_A_v[t].weight))
            a_gap = max(a_gap, biggest(a_k, branch["down"][0]))
            for slot, b in ((0, module.lora_B_k[t].weight), (1, module.lora_B_v[t].weight)):
                b_gap = max(b_gap, biggest(b.detach() * signs[None, :], branch["up"][slot]))
                moved = max(moved, float(branch["up"][slot].abs().max()))
        head = steps["initial_head"] if t == 0 else steps["tasks"][t - 1]["head"]
        rows = slice(CLASSES * t, CLASSES * (t + 1))
        head_gap = biggest(net.classifier_pool[t].weight.detach(), ours["head"]["weight"][rows])
        head_moved = biggest(ours["head"]["weight"][rows], head["weight"][rows])
        print(f"InfLoRA _train of task {t} (2 epochs of 3 fixed batches): designed A {a_gap:.1e} "
              f"({flips} of {12 * RANK} rows with the other SVD sign; A_k = A_v: {kv_gap:.0e}); trained B "
              f"{b_gap:.1e} (moved {moved:.1e}); head {head_gap:.1e} (moved {head_moved:.1e}); memory "
              f"{memory_gap(guy, ours['memory'])}")
        guy._known_classes += CLASSES  # its after_task


def main(argv=None) -> int:
    args = reference_args(__doc__, "liangyanshuo/InfLoRA", "crosscheck.inflora.norga_side", argv)
    sys.modules.setdefault("ipdb", types.ModuleType("ipdb"))  # imported by methods/inflora.py, never called
    from methods.inflora import InfLoRA
    from models.sinet_inflora import SiNet, ViT_lora_co
    from models.vit_inflora import Attention_LoRA

    ref = {"InfLoRA": InfLoRA, "SiNet": SiNet, "ViT_lora_co": ViT_lora_co, "Attention_LoRA": Attention_LoRA}
    saved = torch.load(args.saved / "norga_inflora.pt", weights_only=False)
    forward_check(ref, saved["forward"])
    memory_check(ref, saved["memory"])
    training_steps(ref, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
