"""The reference side of the training-step cross-check, run with the reference code's environment (timm 0.6.7):

    python -m crosscheck.harness.steps_reference --ref CHECKOUT --saved DIR

CHECKOUT is the NoRGa authors' codebase (Minhchuyentoancbn/MoE_PromptCL), DIR what
``python -m crosscheck.harness.steps_norga`` wrote. Each reference model starts from norga's initial tensors and
trains with the reference's own ``engines.dp_engine.train_one_epoch`` (its class mask, pull constraint, gradient
clip over all parameters) and timm's ``create_optimizer`` (Adam, as its configs set it) on the same three batches.
Printed per method: max |reference − norga| of every trained tensor after the three steps, beside how far norga's
tensor moved. DualPrompt and S-Prompt run twice: with the reference's prefix reshape as shipped and patched (one
permute, in memory). ``torch.cuda.synchronize`` is skipped on the CPU (in memory). Nothing is copied from the
reference.
"""
from __future__ import annotations

from argparse import Namespace

import torch

from crosscheck.harness.reference_cli import biggest, load_backbone, patch_prefix_reshape, reference_args, reference_vit

LR = 0.0025


def build(vit_class, name: str, saved: dict):
    """The reference model of ``name`` with norga's initial tensors and the converted backbone."""
    first = saved["initial"]
    if name == "l2p":
        model = reference_vit(vit_class, prompt_length=5, embedding_key="cls", prompt_init="uniform",
                              prompt_pool=True, prompt_key=True, pool_size=30, top_k=5, batchwise_prompt=False,
                              head_type="token", use_g_prompt=False, g_prompt_length=5, g_prompt_layer_idx=[],
                              use_e_prompt=True, e_prompt_layer_idx=[0],
                              use_prefix_tune_for_e_prompt=False)
        model.e_prompt.prompt.data = first["prompts"][None].clone()
    else:
        g_layers, e_layers = saved["layers"]["g"], saved["layers"]["e"]
        model = reference_vit(vit_class, prompt_length=20, embedding_key="cls", prompt_init="uniform",
                              prompt_pool=True, prompt_key=True, pool_size=5, top_k=1, batchwise_prompt=False,
                              head_type="token", use_prompt_mask=True, use_g_prompt=bool(g_layers),
                              g_prompt_length=5, g_prompt_layer_idx=g_layers, use_prefix_tune_for_g_prompt=True,
                              use_e_prompt=True, e_prompt_layer_idx=e_layers, use_prefix_tune_for_e_prompt=True)
        if g_layers:
            model.g_prompt.data = first["g_prompt"].clone()
        model.e_prompt.prompt.data = first["e_prompts"].permute(1, 2, 0, 3, 4, 5).clone()  # (T,P,2,..)->(P,2,T,..)
    model.e_prompt.prompt_key.data = first["keys"].clone()
    model.head.weight.data, model.head.bias.data = first["head.weight"].clone(), first["head.bias"].clone()
    return model


def trained_difference(model, name: str, saved: dict) -> dict:
    """max |reference − norga| of each trained tensor, in norga's layout."""
    ours = saved["trained"]
    out = {"head.weight": biggest(model.head.weight.detach(), ours["head.weight"]),
           "keys": biggest(model.e_prompt.prompt_key.detach(), ours["keys"])}
    if name == "l2p":
        out["prompts"] = biggest(model.e_prompt.prompt.detach()[0], ours["prompts"])
    else:
        out["e_prompts"] = biggest(model.e_prompt.prompt.detach().permute(2, 0, 1, 3, 4, 5), ours["e_prompts"])
        if saved["layers"]["g"]:
            out["g_prompt"] = biggest(model.g_prompt.detach(), ours["g_prompt"])
    return out


def run(modules: dict, name: str, saved: dict, patched: bool) -> dict:
    original, model = reference_vit(modules["vit"]), build(modules["vit"], name, saved)
    for m in (original, model):
        load_backbone(m, saved["backbone"])
    for n, p in model.named_parameters():  # the reference's --freeze list: everything but prompts, keys, head
        p.requires_grad = n.startswith(("e_prompt", "g_prompt", "head"))
    if patched:
        patch_prefix_reshape(model, modules["prompt"])
    optimizer = modules["create_optimizer"](Namespace(opt="adam", lr=LR, weight_decay=0.0, momentum=0.9,
                                                      opt_eps=1e-8, opt_betas=(0.9, 0.999)), model)
    epochs = saved.get("epochs", 1)
    args = Namespace(distributed=False, epochs=epochs, nb_classes=50, print_freq=1000, train_mask=True,
                     pull_constraint=True, pull_constraint_coeff=0.1 if name == "l2p" else 1.0)
    x, y = saved["images"], saved["labels"]
    batches = [(x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)]
    class_mask = [list(range(10 * t, 10 * t + 10)) for t in range(5)]
    for epoch in range(epochs):  # one optimiser for the whole task, as its train_and_evaluate
        modules["train_one_epoch"](model, original, torch.nn.CrossEntropyLoss(), batches, optimizer,
                                   torch.device("cpu"), epoch, 1.0, True, saved.get("task", 0), class_mask, args)
    return trained_difference(model, name, saved)


def main(argv=None) -> int:
    args = reference_args(__doc__, "Minhchuyentoancbn/MoE_PromptCL", "crosscheck.harness.steps_norga", argv)
    from engines.dp_engine import train_one_epoch
    from timm.optim import create_optimizer
    from vits.dp_vision_transformer import VisionTransformer
    import peft.prompt.dp_prompt as prompt_module

    modules = {"vit": VisionTransformer, "prompt": prompt_module, "train_one_epoch": train_one_epoch,
               "create_optimizer": create_optimizer}
    for name in ("l2p", "dualprompt", "sprompt_authors"):
        path = args.saved / f"steps_{name}.pt"
        if not path.exists():
            print(f"{name}: {path} missing (run python -m crosscheck.harness.steps_norga first)")
            continue
        saved = torch.load(path, weights_only=False)
        moved = {k: biggest(v, saved["initial"][k]) for k, v in saved["trained"].items() if v.numel()}
        variants = [("per sample", False)] if name == "l2p" else [("as shipped", False), ("reshape patched", True)]
        for label, patched in variants:
            diff = run(modules, name, saved, patched)
            steps = saved.get("epochs", 1) * len(saved["images"]) // 20
            print(f"{name} ({label}): max |ref - norga| after {steps} steps: "
                  + ", ".join(f"{k} {v:.1e} (moved {moved[k]:.1e})" for k, v in diff.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
