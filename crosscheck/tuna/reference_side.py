"""The reference side of the TUNA cross-check, run with the reference code's environment (timm 0.6.12):

    PYTHONPATH=/work/ref/timm-0.6.12:/work/ref/extras python -m crosscheck.tuna.reference_side \\
        --ref CHECKOUT --saved DIR

CHECKOUT is the TUNA authors' code (the fork Ngahoang2005/ICCV2025-TUNA checked out at 77d4f10, the last authors'
commit), DIR what ``python -m crosscheck.tuna.norga_side`` wrote. The reference ViT is its
``backbone/vit_tuna.VisionTransformer`` built as DINOv2 ViT-S/14 at 56 px; norga's converted backbone is loaded
with the fused qkv split into q/k/v and each block's layer scale folded into the linear before it (attn.proj, fc2:
gamma x W, gamma x b, an exact rewrite, as the reference block has no layer scale). Its adapters' dropout (0.1,
fixed in ``init_adapters``) is set to 0 on the built modules, as norga's side runs with dropout 0. Training runs
the reference's own ``Learner._init_train``, ``get_optimizer``, ``get_scheduler`` and ``orth_loss`` on a Learner
whose attributes are set directly (its data manager and loaders are not built); prediction runs its
``_eval_cnn``. Printed: max |reference − norga| of features, merged adapter, trained tensors (beside how far
norga's moved) and the predicted classes. This file imports the reference checkout; it copies none of it.
"""
from __future__ import annotations

import logging
from functools import partial

import numpy as np
import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args

CFG = {"ffn_adapt": True, "ffn_option": "parallel", "ffn_adapter_layernorm_option": "none",
       "ffn_adapter_init_option": "lora", "ffn_adapter_scalar": "0.1", "ffn_num": 16, "d_model": 384,
       "_device": "cpu", "vpt_on": False, "vpt_num": 0}


def converted(norga: dict) -> dict:
    """norga's timm DINOv2 state (wrapped blocks) in vit_tuna's layout, layer scale folded into proj and fc2."""
    out = {}
    for key, value in norga.items():
        out[key.replace(".block.", ".")] = value
    for i in range(12):
        p = f"blocks.{i}."
        q, k, v = out.pop(p + "attn.qkv.weight").chunk(3)
        qb, kb, vb = out.pop(p + "attn.qkv.bias").chunk(3)
        out.update({p + "attn.q_proj.weight": q, p + "attn.k_proj.weight": k, p + "attn.v_proj.weight": v,
                    p + "attn.q_proj.bias": qb, p + "attn.k_proj.bias": kb, p + "attn.v_proj.bias": vb})
        for ls, lin in (("ls1", "attn.proj"), ("ls2", "mlp.fc2")):
            gamma = out.pop(p + f"{ls}.gamma")
            out[p + f"{lin}.weight"] = out[p + f"{lin}.weight"] * gamma[:, None]
            out[p + f"{lin}.bias"] = out[p + f"{lin}.bias"] * gamma
        for name in ("fc1", "fc2"):
            for t in ("weight", "bias"):
                out[p + f"{name}.{t}"] = out.pop(p + f"mlp.{name}.{t}")
    return out


def build_vit(vit_tuna, easydict, backbone: dict):
    vit = vit_tuna.VisionTransformer(img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4,
                                     qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), num_classes=0,
                                     global_pool=False, drop_path_rate=0.0, tuning_config=easydict(CFG))
    missing, unexpected = vit.load_state_dict(converted(backbone), strict=False)
    assert not unexpected and all("adapter" in k for k in missing), (missing, unexpected)
    for name, p in vit.named_parameters():  # the Learner's rule: only adapters (and the head) train
        p.requires_grad = "adapter" in name
    return vit


def set_adapters(modules, state: dict) -> None:
    """norga's {block: {down.*, up.*}} into the reference's per-block Adapter modules; dropout 0."""
    with torch.no_grad():
        for b, adapter in enumerate(modules):
            for ours, theirs in (("down", "down_proj"), ("up", "up_proj")):
                getattr(adapter, theirs).weight.copy_(state[b][f"{ours}.weight"])
                getattr(adapter, theirs).bias.copy_(state[b][f"{ours}.bias"])
            adapter.dropout = 0.0


def learner_shell(tuna, vit, linears, config: dict):
    learner = object.__new__(tuna.Learner)
    net = nn.Module()
    net.backbone, net.fc = vit, linears.SimpleContinualLinear(384, 10)
    learner._network, learner._device, learner.topk = net, "cpu", 5
    learner.args = {"tuned_epoch": 1, "optimizer": "sgd", "scheduler": "cosine", "scale": config["scale"],
                    "m": config["margin"], "reg": config["orth_weight"]}
    learner.init_lr, learner.weight_decay, learner.min_lr = config["lr"], config["weight_decay"], 0.0
    learner.use_orth, learner._cur_task, learner._known_classes = True, -1, 0
    return learner


def train(learner, saved: dict) -> None:
    net = learner._network
    for task in (0, 1):
        step = saved["steps"][task]
        learner._cur_task, learner._known_classes = task, 10 * task
        if task > 0:
            net.fc.update(10, freeze_old=False)
        else:
            set_adapters(net.backbone.cur_adapter, step["adapter_init"])
        with torch.no_grad():
            for head, init in zip(net.fc.heads, step["head_init"]):
                head[0].weight.copy_(init)
        x, y = step["images"], step["labels"]
        batches = [(None, x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)]
        optimizer = learner.get_optimizer(net.backbone)
        learner._init_train(batches, None, optimizer, learner.get_scheduler(optimizer))
        net.backbone.adapter_update()
        report(task, net, saved)


def report(task: int, net, saved: dict) -> None:
    step, first = saved["steps"][task], saved["steps"][task]["adapter_init"]
    ours = step["adapter"]
    diffs, moved = [], []
    for b, adapter in enumerate(net.backbone.cur_adapter):
        for o, t in (("down", "down_proj"), ("up", "up_proj")):
            diffs.append(biggest(getattr(adapter, t).weight.detach(), ours[b][f"{o}.weight"]))
            moved.append(biggest(ours[b][f"{o}.weight"], first[b][f"{o}.weight"]))
    heads = [biggest(h[0].weight.detach(), o) for h, o in zip(net.fc.heads, step["heads"])]
    head_moved = [biggest(o, i) for o, i in zip(step["heads"], step["head_init"])]
    print(f"task {task} (3 steps): adapter max |ref - norga| {max(diffs):.1e} (moved {max(moved):.1e}); head blocks "
          + ", ".join(f"{d:.1e} (moved {m:.1e})" for d, m in zip(heads, head_moved)))
    if task == 1:  # the reference's optimiser also holds the snapshot of task 0's adapter
        snapshot = net.backbone.adapter_list[0]
        moved = max(biggest(a.up_proj.weight.detach(), saved["steps"][0]["adapter"][b]["up.weight"])
                    for b, a in enumerate(snapshot))
        diff = max(biggest(a.up_proj.weight.detach(), step["first_adapter"][b]["up.weight"])
                   for b, a in enumerate(snapshot))
        print(f"task 1: task 0's adapter up-projection, moved by the orthogonality term during task 1: "
              f"max |ref - norga| {diff:.1e} (moved {moved:.1e})")


@torch.no_grad()
def check_forward(learner, saved: dict) -> None:
    fw, net = saved["forward"], learner._network
    vit = net.backbone
    for k, modules in ((1, vit.adapter_list[0]), (2, vit.adapter_list[1])):
        set_adapters(modules, fw["adapters"][k])
    set_adapters(vit.cur_adapter, fw["adapters"][2])
    for head, w in zip(net.fc.heads, fw["heads"]):
        head[0].weight.copy_(w)
    vit.merge()
    merged = max(biggest(getattr(a, t).weight, fw["adapters"][0][b][f"{o}.weight"])
                 for b, a in enumerate(vit.merged_adapter) for o, t in (("down", "down_proj"), ("up", "up_proj")))
    vit.eval()
    x = fw["images"]
    feats = {k: vit(x, adapter_id=k - 1, train=False)["features"] for k in (1, 2)}
    print("forward: features under task adapter 0, 1: "
          + ", ".join(f"{biggest(feats[k], fw['features'][k]):.1e}" for k in (1, 2))
          + f"; elect-merged adapter {merged:.1e}; merged-adapter features "
          + f"{biggest(vit(x, adapter_id=3, train=False)['features'], fw['features'][0]):.1e}")
    learner._cur_task, learner._total_classes = 1, 20
    loader = [(None, x, torch.zeros(len(x), dtype=torch.long))]
    y_pred, _ = learner._eval_cnn(loader)
    ours = fw["scores"].topk(5, dim=1)[1].numpy()
    print(f"forward: top-5 predictions equal: {bool(np.array_equal(y_pred, ours))} "
          f"(top-1 reference {y_pred[:, 0].tolist()}, norga {ours[:, 0].tolist()})")


def main(argv=None) -> int:
    args = reference_args(__doc__, "Ngahoang2005/ICCV2025-TUNA @ 77d4f10", "crosscheck.tuna.norga_side", argv)
    logging.disable(logging.INFO)
    from easydict import EasyDict
    import backbone.linears as linears
    import backbone.vit_tuna as vit_tuna
    import models.tuna as tuna

    saved = torch.load(args.saved / "tuna_norga.pt", weights_only=False)
    vit = build_vit(vit_tuna, EasyDict, saved["backbone"])
    learner = learner_shell(tuna, vit, linears, saved["config"])
    train(learner, saved)
    check_forward(learner, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
