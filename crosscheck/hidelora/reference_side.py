"""The reference side of the HiDe-LoRA cross-check, run with the reference code's environment (timm 0.6.7):

    python -m crosscheck.hidelora.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is ivcylc/HiDe-PET (131f7ce), DIR what ``python -m crosscheck.hidelora.norga_side`` wrote. Nothing of
the reference is patched on disk or in memory beyond ``torch.cuda.synchronize`` (a no-op, as for every reference
side). Its ``VisionTransformer`` of ``vits/hide_lora_vision_transformer.py`` is built as DINOv2 ViT-S/14 at 56 px
(layer scale, as its Block has) with ``lora=True, lora_type='hide', rank=5, lora_depth=5`` and given norga's
converted backbone, task LoRAs (``HideLoraPool``'s k/v factors) and head. Printed (max |reference - norga|):

* forward: frozen features, and features and logits with each sample's own task LoRA (the reference's test-time
  per-sample ``bmm`` path);
* training: task 0's WTP with the engine's own ``train_one_epoch`` (its class masking, ``orth_loss`` with
  ``--reg 0.1``, clipping of ``model.parameters()`` at 2.0) and timm's ``create_optimizer`` (Adam, lr 0.01, the
  parameters the trainer leaves trainable); task 1 the same after the engine's task-start copy of the LoRA of
  task 0 (then reset to norga's start of task 1, so the step is compared alone) and with ``cls_mean`` filled as its
  ``_compute_mean`` does (covariance mode); then its ``lora_momentum``
  0.1 step. The copy, ``_compute_mean`` and the momentum sit inside ``train_and_evaluate`` between distributed calls
  (``dist.barrier``, ``model.module``), so those three statements are restated here, not called.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from crosscheck.harness.reference_cli import biggest, reference_args, reference_vit

CLASS_MASK = [list(range(10 * t, 10 * t + 10)) for t in range(5)]
FREEZE = ("blocks", "patch_embed", "cls_token", "norm", "pos_embed")  # configs/imr_hidelora.py --freeze


def hide_lora_vit(vit_module, pool: int):
    return reference_vit(vit_module.VisionTransformer, lora=True, lora_type="hide", rank=5, lora_pool_size=pool,
                         lora_depth=5)


def load(model, state_dict: dict, lora: dict) -> None:
    """norga's backbone (strict apart from the head and the LoRA pool), its task LoRAs and head."""
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    assert not unexpected and all(k.startswith(("head", "lora_layer")) for k in missing), (missing, unexpected)
    with torch.no_grad():
        for name in ("k_lora_A", "k_lora_B", "v_lora_A", "v_lora_B"):
            pool = getattr(model.lora_layer, name)
            pool.zero_()
            pool[:len(lora[name])].copy_(lora[name])
        model.head.weight.copy_(lora["head.weight"])
        model.head.bias.copy_(lora["head.bias"])


@torch.no_grad()
def check_forward(vit_module, saved: dict) -> None:
    model = hide_lora_vit(vit_module, pool=3)
    load(model, saved["state_dict"], saved["lora"])
    x = saved["images"]
    frozen = reference_vit(vit_module.VisionTransformer)
    load_plain(frozen, saved["state_dict"])
    print("forward  frozen features:", biggest(frozen(x)["pre_logits"], saved["frozen"]))
    out = model(x, task_id=saved["tasks"])
    print("forward  features under each sample's task LoRA:", biggest(out["pre_logits"], saved["features"]),
          "| logits:", biggest(out["logits"], saved["logits"]))


def load_plain(model, state_dict: dict) -> None:
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    assert not unexpected and all(k.startswith("head") for k in missing), (missing, unexpected)


def lora_of(model, tasks: int) -> dict:
    out = {name: getattr(model.lora_layer, name)[:tasks].detach().clone()
           for name in ("k_lora_A", "k_lora_B", "v_lora_A", "v_lora_B")}
    out.update({f"head.{k}": v.detach().clone() for k, v in model.head.state_dict().items()})
    return out


def load_trained(model, lora: dict) -> None:
    """The LoRA pool's first tasks and the head set to ``lora`` (norga's tensors), in place."""
    with torch.no_grad():
        for name in ("k_lora_A", "k_lora_B", "v_lora_A", "v_lora_B"):
            getattr(model.lora_layer, name)[:len(lora[name])].copy_(lora[name])
        model.head.weight.copy_(lora["head.weight"])
        model.head.bias.copy_(lora["head.bias"])


def compare(label: str, ours: dict, theirs: dict, start: dict) -> None:
    for name in theirs:
        moved = biggest(theirs[name], start[name])
        mean = float((theirs[name] - ours[name]).abs().mean())
        print(f"{label} {name:12s} max|ref - norga| {biggest(theirs[name], ours[name]):.3e}  mean {mean:.1e}  "
              f"(moved {moved:.3e})")


def check_training(vit_module, engine, timm_optim, saved: dict, state_dict: dict) -> None:
    model = hide_lora_vit(vit_module, pool=2)
    load(model, state_dict, saved["task0"]["initial"])
    for n, p in model.named_parameters():
        if n.startswith(FREEZE):
            p.requires_grad = False
    print("trainable:", sorted({n.split(".")[0] + "." + n.split(".")[1] for n, p in model.named_parameters()
                                if p.requires_grad}))
    args = SimpleNamespace(distributed=False, print_freq=100, epochs=1, train_mask=True, nb_classes=50, reg=0.1,
                           opt="adam", lr=0.01, weight_decay=0.0, opt_eps=1e-8, opt_betas=(0.9, 0.999), momentum=0.9)
    engine.cls_mean, engine.cls_cov = {}, {}
    for task in (0, 1):
        part = saved[f"task{task}"]
        if task > 0:  # the engine's task start: LoRA_t <- LoRA_{t-1} (train_and_evaluate, non-distributed branch)
            with torch.no_grad():
                for name in ("k_lora_A", "k_lora_B", "v_lora_A", "v_lora_B"):
                    getattr(model.lora_layer, name)[task] = getattr(model.lora_layer, name)[task - 1]
        compare(f"task {task} start", part["initial"], lora_of(model, task + 1), part["initial"])
        if task > 0:  # the step itself from norga's start (the start's own difference is task 0's, printed above)
            load_trained(model, part["initial"])
        optimizer = timm_optim.create_optimizer(args, model)
        engine.train_one_epoch(model, torch.nn.Identity(), torch.nn.CrossEntropyLoss(), part["batches"], optimizer,
                               torch.device("cpu"), 0, 2.0, True, task, CLASS_MASK, None, args)
        if task > 0:  # the engine's lora_momentum step (written for DDP's model.module)
            with torch.no_grad():
                for name in ("k_lora_A", "k_lora_B", "v_lora_A", "v_lora_B"):
                    pool = getattr(model.lora_layer, name)
                    pool[task].copy_((1 - 0.1) * pool[task].clone() + 0.1 * pool[0:task].clone().mean(dim=0))
        compare(f"task {task} trained", part["trained"], lora_of(model, task + 1), part["initial"])
        model.eval()
        with torch.no_grad():  # the engine's _compute_mean, covariance mode: the next task's prototypes
            x = torch.cat([b[0] for b in part["batches"]])
            y = torch.cat([b[1] for b in part["batches"]])
            feats = model(x, task_id=task, train=True)["pre_logits"]
            for c in CLASS_MASK[task]:
                engine.cls_mean[c] = feats[y == c].mean(dim=0)
        if task == 0:
            print("task 1 prototypes (class means under LoRA_0):",
                  biggest(torch.stack(list(engine.cls_mean.values())), saved["prototypes_task1"]))


def main(argv=None) -> int:
    args = reference_args(__doc__, "ivcylc/HiDe-PET", "python -m crosscheck.hidelora.norga_side")
    import engines.hide_lora_wtp_and_tap_engine as engine
    import timm.optim as timm_optim
    import vits.hide_lora_vision_transformer as vit_module

    saved = torch.load(args.saved / "norga_hidelora.pt", weights_only=False)
    torch.manual_seed(0)
    check_forward(vit_module, saved["forward"])
    check_training(vit_module, engine, timm_optim, saved["training"], saved["forward"]["state_dict"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
