"""The reference side of the MOS cross-check, run with a reference environment (timm 0.6.7):

    python -m crosscheck.mos.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is sun-hailong/AAAI25-MOS, DIR what ``python -m crosscheck.mos.norga_side`` wrote. Its
``backbone/vit_mos.py`` VisionTransformer is built as DINOv2 ViT-S/14 at 56 px with its own adapter config
(parallel, no layer norm, scale 0.1, r = 16, momentum 0.1); its blocks have no layer scale, so DINOv2's ls1/ls2 are
folded into ``attn.proj`` and ``fc2`` (weights and biases times gamma, the same function) and timm's fused qkv is
split into its q/k/v projections. Adapter dropout is set to 0 (norga's side too). Its ``models/mos.py`` Learner is
assembled around it (``__new__``, the attributes its methods read) and its own methods run: ``_eval_cnn`` on the
forward check's images, ``get_optimizer``, ``get_scheduler``, ``_init_train`` on the three training batches, and
``_compute_mean`` on the statistics check's images (its DataLoader's ``num_workers=4`` set to 0 in memory: the one
patch). Printed: max |reference - norga| of features, logits, retrieved adapters, predictions, every trained tensor
(with how far it moved), the class statistics and the adapter they leave behind. Nothing is copied.
"""
from __future__ import annotations

import logging
from functools import partial
from types import SimpleNamespace

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args, without_workers

NAMES = {"down.weight": ("down_proj", "weight"), "down.bias": ("down_proj", "bias"), "up.weight": ("up_proj", "weight"),
         "up.bias": ("up_proj", "bias")}


def reference_state(state: dict) -> dict:
    """timm's DINOv2 weights in vit_mos's layout: qkv split, mlp.fc1/fc2 renamed, layer scale folded."""
    out = {}
    for k, v in state.items():
        if ".ls1." in k or ".ls2." in k:
            continue
        if "attn.qkv" in k:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), v.chunk(3)):
                out[k.replace("qkv", name)] = part
        else:
            out[k.replace("mlp.", "")] = v
    for k in [k for k in state if k.endswith("ls1.gamma") or k.endswith("ls2.gamma")]:
        block, gamma = k.rsplit(".", 2)[0], state[k]
        target = f"{block}.attn.proj" if "ls1" in k else f"{block}.fc2"
        out[f"{target}.weight"] = out[f"{target}.weight"] * gamma[:, None]
        out[f"{target}.bias"] = out[f"{target}.bias"] * gamma
    return out


def build_vit(vit_mos, state: dict):
    config = SimpleNamespace(ffn_adapt=True, ffn_option="parallel", ffn_adapter_layernorm_option="none",
                             ffn_adapter_init_option="lora", ffn_adapter_scalar="0.1", ffn_num=16, d_model=384,
                             _device="cpu", adapter_momentum=0.1, vpt_on=False, vpt_num=0)
    vit = vit_mos.VisionTransformer(img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4,
                                    qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), num_classes=50,
                                    global_pool=False, drop_path_rate=0.0, tuning_config=config)
    missing, unexpected = vit.load_state_dict(reference_state(state), strict=False)
    assert all(k.startswith(("head", "cur_adapter")) for k in missing) and not unexpected, (missing, unexpected)
    for name, p in vit.named_parameters():
        p.requires_grad = "head" in name or "adapter" in name  # as vit_base_patch16_224_in21k_mos does
    vit.out_dim = 384
    set_dropout(vit.cur_adapter)
    return vit


def set_dropout(adapters) -> None:
    for a in adapters:
        a.dropout = 0.0


def load_adapters(adapters, states: list) -> None:
    with torch.no_grad():
        for adapter, state in zip(adapters, states):
            for key, (module, attr) in NAMES.items():
                getattr(getattr(adapter, module), attr).data = state[key].clone()


def save_like_the_reference(vit, snapshots: list) -> None:
    """What its ``adapter_update`` does after each task, for the given saved adapters."""
    for states in snapshots:
        load_adapters(vit.cur_adapter, states)
        vit.adapter_update()
    for adapters in vit.adapter_list:
        set_dropout(adapters)


def learner(ref: dict, vit, tasks: int, args: dict):
    net = ref["MOSNet"].__new__(ref["MOSNet"])
    nn.Module.__init__(net)
    net.backbone, net._device, net.fc = vit, "cpu", ref["CosineLinear"](384, 50).requires_grad_(False)
    me = ref["Learner"].__new__(ref["Learner"])
    me._network, me._device, me.topk, me._cur_task = net, "cpu", 1, tasks - 1
    me._known_classes, me._total_classes = 10 * (tasks - 1), 10 * tasks
    me.cls2task = {c: c // 10 for c in range(50)}
    me.cls_mean, me.args, me.ensemble = {}, args, args["ensemble"]
    me.init_lr, me.weight_decay, me.min_lr, me.batch_size = args["init_lr"], args["weight_decay"], 0.0, 8
    me._multiple_gpus = []
    return me


ARGS = {"init_lr": 0.03, "weight_decay": 0.0005, "optimizer": "sgd", "scheduler": "cosine", "tuned_epoch": 1,
        "reg": 0.1, "adapter_momentum": 0.1, "ensemble": True}


@torch.no_grad()
def check_forward(ref: dict, saved: dict) -> None:
    f, x = saved["forward"], saved["forward"]["images"]
    vit = build_vit(ref["vit_mos"], f["state_dict"])
    print("MOS frozen features (adapter_id -1), max |ref - norga|:",
          f"{biggest(vit(x, adapter_id=-1)['features'], f['frozen']):.1e}")
    save_like_the_reference(vit, f["snapshots"])
    me = learner(ref, vit.eval(), 5, ARGS)
    me._network.fc.weight.data = f["prototypes"].clone()
    vit.head.load_state_dict(f["head"])
    loader = [(None, x, torch.zeros(len(x), dtype=torch.long))]
    first, _ = me._eval_cnn(loader)  # its first test forward: the saved adapters k > 0 only partly re-merged
    for _ in range(10):  # the re-merging converges: 120 more in-place merges per adapter
        me._eval_cnn(loader)
    settled, _ = me._eval_cnn(loader)
    feats = torch.stack([vit(x, adapter_id=k, train=False)["features"] for k in range(5)], 1)
    print("MOS features under the test adapters 0-4:", f"{biggest(feats, f['features']):.1e}",
          f"| adapter effect max |adapted - frozen| {biggest(feats, f['frozen'][:, None]):.2f}")
    orig = me._network.forward_orig(x)["logits"]
    print("MOS prototype (adapter 0) logits:", f"{biggest(orig, f['prototype_logits']):.1e}")
    chosen = retrieved(me, feats, orig)
    print("MOS retrieved adapter equal for", int((chosen == f["chosen"]).sum()), "of", len(x), "samples",
          f"(moved away from the first guess: {int((chosen != me.cls2task_tensor[orig.argmax(1)]).sum())})")
    print("MOS predictions of its _eval_cnn equal norga's: after convergence",
          bool(torch.equal(torch.as_tensor(settled[:, 0]), f["predicted"])), "| at its first test forward",
          int((torch.as_tensor(first[:, 0]) == f["predicted"]).sum()), "of", len(x))


def retrieved(me, feats, orig):
    """The adapter its _eval_cnn ends on per sample (the same loop, written out, to compare the choice itself)."""
    me.cls2task_tensor = torch.tensor([me.cls2task[c] for c in range(50)])
    out = []
    for i in range(len(feats)):
        prev = int(me.cls2task_tensor[orig[i].argmax()])
        for step in range(1, 5):
            cur = int(me.cls2task_tensor[me._network.backbone(feats[i, prev][None], fc_only=True)["logits"].argmax()])
            if step >= 4 or cur == prev:
                break
            prev = cur
        out.append(prev)
    return torch.tensor(out)


def check_training(ref: dict, saved: dict) -> None:
    t = saved["training"]
    vit = build_vit(ref["vit_mos"], saved["forward"]["state_dict"])
    save_like_the_reference(vit, t["snapshots"])
    load_adapters(vit.cur_adapter, t["current_before"])
    vit.head.load_state_dict(t["head_before"])
    me = learner(ref, vit, 3, ARGS)
    me.cls_mean = {c: m.clone() for c, m in t["means"].items()}
    optimizer = me.get_optimizer(vit)
    scheduler = me.get_scheduler(optimizer)
    me._init_train([(None, x, y) for x, y in t["batches"]], None, optimizer, scheduler)
    worst, moved = 0.0, 0.0
    for adapter, after, before in zip(vit.cur_adapter, t["current_after"], t["current_before"]):
        for key, (module, attr) in NAMES.items():
            value = getattr(getattr(adapter, module), attr).detach()
            worst, moved = max(worst, biggest(value, after[key])), max(moved, biggest(after[key], before[key]))
    print("MOS trained adapter after 3 steps, max |ref - norga| over its 48 tensors:", f"{worst:.1e}",
          f"(moved {moved:.1e})")
    for key in ("weight", "bias"):
        print(f"MOS head {key} after 3 steps:", f"{biggest(vit.head.state_dict()[key], t['head_after'][key]):.1e}",
              f"(moved {biggest(t['head_after'][key], t['head_before'][key]):.1e})")


class PerClass:
    """The part of its DataManager ``_compute_mean`` calls: one class's images (already 56 px) as (index, image,
    label) items, in the order norga's side saved them."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def get_dataset(self, indices, source, mode, ret_data=False):
        keep = torch.isin(self.y, torch.as_tensor(indices))
        x, y = self.x[keep], self.y[keep]
        items = [(i, x[i], int(y[i])) for i in range(len(y))]
        return (x, y, items) if ret_data else items


@torch.no_grad()
def check_statistics(ref: dict, saved: dict) -> None:
    st = saved["statistics"]
    vit = build_vit(ref["vit_mos"], saved["forward"]["state_dict"])
    save_like_the_reference(vit, st["snapshots"])
    load_adapters(vit.cur_adapter, st["current_before"])
    vit.adapter_update()  # its _train: W_2 saved (and summed) before _compute_mean
    me = learner(ref, vit, 3, {**ARGS, "ca_storage_efficient_method": "covariance"})
    me.batch_size, me._total_classes, me.cls_cov = 8, 23, {}
    me.data_manager = PerClass(st["images"], st["labels"])
    without_workers(ref["mos_module"])
    me._compute_mean(vit)
    for target in ("earlier", "running"):
        feats, labels = st[target]["features"], st[target]["labels"]
        means = max(biggest(me.cls_mean[c], feats[labels == c].mean(0)) for c in (20, 21, 22))
        covs = max(biggest(me.cls_cov[c] - 1e-4 * torch.eye(384), torch.cov(feats[labels == c].T))
                   for c in (20, 21, 22))
        adapter = max(biggest(getattr(getattr(a, module), attr), after[key])
                      for a, after in zip(vit.cur_adapter, st[target]["current_after"])
                      for key, (module, attr) in NAMES.items())
        named = "S_t / t (now)" if target == "earlier" else "(S_t + W_t) / t (before)"
        print(f"MOS statistics, norga's merge target {named}: class means max |ref - norga| {means:.1e}, "
              f"covariances {covs:.1e}, the adapter left behind {adapter:.1e}")
    spread = max(biggest(me.cls_mean[c], me.cls_mean[20]) for c in (21, 22))
    print(f"MOS statistics: for scale, the class means differ from each other by up to {spread:.1e}")


def main(argv=None) -> int:
    args = reference_args(__doc__, "sun-hailong/AAAI25-MOS", "crosscheck.mos.norga_side", argv)
    logging.disable(logging.INFO)
    import models.mos as mos_module
    from backbone import vit_mos
    from backbone.linears import CosineLinear
    from models.mos import Learner
    from utils.inc_net import MOSNet

    ref = {"vit_mos": vit_mos, "CosineLinear": CosineLinear, "Learner": Learner, "MOSNet": MOSNet,
           "mos_module": mos_module}
    saved = torch.load(args.saved / "norga_mos.pt", weights_only=False)
    check_forward(ref, saved)
    check_training(ref, saved)
    check_statistics(ref, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
