"""A whole L2P run in lock step, the reference side (run with the reference code's environment, timm 0.6.7):

    python -m crosscheck.harness.lockstep_reference --ref CHECKOUT --saved FILE

CHECKOUT is the NoRGa authors' codebase (Minhchuyentoancbn/MoE_PromptCL), FILE what
``python -m crosscheck.harness.lockstep_norga`` wrote. The reference L2P model starts from norga's initial prompts,
keys and head on the converted backbone; each task gets a new optimiser from timm's ``create_optimizer`` (Adam
at norga's lr, as its ``--reinit_optimizer``) and the reference's own ``engines.dp_engine.train_one_epoch`` (its
class mask, pull constraint, clip over all parameters) runs every epoch on norga's batches of that epoch; after
each task its own ``evaluate`` scores the test tasks seen so far. Printed per task: the two accuracy rows and
max |reference − norga| of each trained tensor. Nothing is copied from the reference.
"""
from __future__ import annotations

from argparse import Namespace

import torch

from crosscheck.harness.reference_cli import biggest, load_backbone, reference_args, reference_vit


def build_l2p(vit_class, saved: dict):
    """The reference's L2P (pool 30, top-5, length 5, class-token head) from norga's initial tensors."""
    first = saved["initial"]
    model = reference_vit(vit_class, prompt_length=5, embedding_key="cls", prompt_init="uniform", prompt_pool=True,
                          prompt_key=True, pool_size=30, top_k=5, batchwise_prompt=False, head_type="token",
                          use_g_prompt=False, g_prompt_length=5, g_prompt_layer_idx=[], use_e_prompt=True,
                          e_prompt_layer_idx=[0], use_prefix_tune_for_e_prompt=False)
    load_backbone(model, saved["backbone"])
    with torch.no_grad():
        model.e_prompt.prompt.copy_(first["prompts"][None])
        model.e_prompt.prompt_key.copy_(first["keys"])
        model.head.weight.copy_(first["head.weight"])
        model.head.bias.copy_(first["head.bias"])
    for name, p in model.named_parameters():  # its --freeze list leaves the prompts, keys and head trainable
        p.requires_grad = name.startswith(("e_prompt", "head"))
    return model


def differences(model, norga: dict) -> dict:
    return {"prompts": biggest(model.e_prompt.prompt.detach()[0], norga["prompts"]),
            "keys": biggest(model.e_prompt.prompt_key.detach(), norga["keys"]),
            "head": biggest(model.head.weight.detach(), norga["head.weight"])}


def main(argv=None) -> int:
    args = reference_args(__doc__, "Minhchuyentoancbn/MoE_PromptCL", "crosscheck.harness.lockstep_norga", argv)
    from engines.dp_engine import evaluate, train_one_epoch
    from timm.optim import create_optimizer
    from vits.dp_vision_transformer import VisionTransformer

    saved = torch.load(args.saved, weights_only=False)
    original, model = reference_vit(VisionTransformer), build_l2p(VisionTransformer, saved)
    load_backbone(original, saved["backbone"])
    classes = saved["task_classes"]
    task_of = {c: t for t, cs in enumerate(classes) for c in cs}
    run = Namespace(distributed=False, epochs=saved["epochs"], nb_classes=sum(map(len, classes)), print_freq=10**6,
                    train_mask=True, task_inc=False, pull_constraint=True, pull_constraint_coeff=0.1)
    opt = Namespace(opt="adam", lr=saved["lr"], weight_decay=0.0, momentum=0.9, opt_eps=1e-8, opt_betas=(0.9, 0.999))
    cpu = torch.device("cpu")
    for t, epochs in enumerate(saved["batches"]):
        optimizer = create_optimizer(opt, model)  # a new one per task, as its --reinit_optimizer
        for e, batches in enumerate(epochs):
            train_one_epoch(model, original, torch.nn.CrossEntropyLoss(), batches, optimizer, cpu, e, 1.0, True, t,
                            classes, run)
        ours = [evaluate(model, original, saved["tests"][i], cpu, i, classes, task_of, run)["Acc@1"]  # percent
                for i in range(t + 1)]
        theirs = [100 * saved["acc"][i][t] for i in range(t + 1)]
        print(f"task {t}: reference " + " ".join(f"{a:.1f}" for a in ours) + " | norga "
              + " ".join(f"{a:.1f}" for a in theirs) + " | max |ref - norga|: "
              + ", ".join(f"{k} {v:.1e}" for k, v in differences(model, saved["after_task"][t]).items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
