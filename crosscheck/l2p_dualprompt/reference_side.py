"""The reference side of the cross-check, run with the reference code's own environment (timm 0.6.7):

    python -m crosscheck.l2p_dualprompt.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is the NoRGa authors' codebase (Minhchuyentoancbn/MoE_PromptCL; its ``vits/dp_vision_transformer.py`` and
``peft/prompt/dp_prompt.py`` implement L2P and DualPrompt), DIR what ``python -m
crosscheck.l2p_dualprompt.norga_side`` wrote. The reference models are built directly from its VisionTransformer
class (ViT-S/14 at 56 px with layer scale, as DINOv2), given norga's converted backbone, prompts, keys and head, and
evaluated on the same batch. Printed: frozen features, prompt selection, prompted features and logits, max
|reference − norga|; for L2P also with its shipped batch-wise prompt vote, for DualPrompt also with its key/value
reshape patched (one permute). This file imports the reference checkout; it copies none of it.
"""
from __future__ import annotations

import torch

from crosscheck.harness.reference_cli import (biggest, load_backbone, patch_prefix_reshape, reference_args,
                                              reference_vit)


@torch.no_grad()
def check_l2p(vit_class, saved: dict) -> None:
    original = reference_vit(vit_class)
    l2p = reference_vit(vit_class, prompt_length=5, embedding_key="cls", prompt_init="uniform", prompt_pool=True,
                        prompt_key=True, pool_size=30, top_k=5, batchwise_prompt=False, head_type="token",
                        use_g_prompt=False, g_prompt_length=5, g_prompt_layer_idx=[], use_e_prompt=True,
                        e_prompt_layer_idx=[0], use_prefix_tune_for_e_prompt=False)
    for model in (original, l2p):
        load_backbone(model, saved["state_dict"])
        model.head.load_state_dict(saved["head"])
    l2p.e_prompt.prompt.copy_(saved["prompts"][None])
    l2p.e_prompt.prompt_key.copy_(saved["keys"])
    x = saved["images"]
    frozen = original(x)["pre_logits"]
    out = l2p(x, cls_features=frozen)
    print("L2P  frozen class-token features, max |ref - norga|:", biggest(frozen, saved["frozen"]))
    print("L2P  same top-5 prompts per sample:", bool(torch.equal(out["prompt_idx"].sort(1).values,
                                                                   saved["chosen"].sort(1).values)),
          "| similarity:", biggest(out["similarity"], saved["similarity"]))
    print("L2P  prompted features:", biggest(out["pre_logits"], saved["prompted"]),
          "| logits:", biggest(out["logits"], saved["logits"]))
    l2p.e_prompt.batchwise_prompt = True  # the shipped CIFAR setting: a majority vote over the batch
    voted = l2p(x, cls_features=frozen)
    changed = int((voted["prompt_idx"].sort(1).values != saved["chosen"].sort(1).values).any(1).sum())
    print(f"L2P  with the shipped batch-wise vote: {changed} of {len(x)} samples get other prompts; logits:",
          biggest(voted["logits"], saved["logits"]))


@torch.no_grad()
def check_dualprompt(vit_class, prompt_module, base: dict, saved: dict) -> None:
    model = reference_vit(vit_class, prompt_length=20, embedding_key="cls", prompt_init="uniform", prompt_pool=True,
                          prompt_key=True, pool_size=5, top_k=1, batchwise_prompt=False, head_type="token",
                          use_g_prompt=True, g_prompt_length=5, g_prompt_layer_idx=saved["g_layers"],
                          use_prefix_tune_for_g_prompt=True, use_e_prompt=True, e_prompt_layer_idx=saved["e_layers"],
                          use_prefix_tune_for_e_prompt=True)
    load_backbone(model, base["state_dict"])
    model.g_prompt.data = saved["g_prompt"].clone()  # (P_g, 2, L_g, H, Dh) in both
    model.e_prompt.prompt.copy_(saved["e_prompts"].permute(1, 2, 0, 3, 4, 5))  # (T, P_e, 2, ...) -> (P_e, 2, T, ...)
    model.e_prompt.prompt_key.copy_(saved["keys"])
    model.head.load_state_dict(saved["head"])
    x, query = base["images"], saved["query"]
    shipped = model(x, cls_features=query)
    print("Dual same E-prompt per sample:", bool(torch.equal(shipped["prompt_idx"][:, 0], saved["tasks"])))
    print("Dual as shipped (prefix reshape without permute): features:", biggest(shipped["pre_logits"],
                                                                               saved["features"]),
          "| logits:", biggest(shipped["logits"], saved["logits"]))
    patch_prefix_reshape(model, prompt_module)
    fixed = model(x, cls_features=query)
    print("Dual with the reshape patched (permute): features:", biggest(fixed["pre_logits"], saved["features"]),
          "| logits:", biggest(fixed["logits"], saved["logits"]))


def main(argv=None) -> int:
    args = reference_args(__doc__, "Minhchuyentoancbn/MoE_PromptCL", "crosscheck.l2p_dualprompt.norga_side", argv)
    from vits.dp_vision_transformer import VisionTransformer
    import peft.prompt.dp_prompt as prompt_module

    base = torch.load(args.saved / "norga_l2p.pt", weights_only=False)
    check_l2p(VisionTransformer, base)
    check_dualprompt(VisionTransformer, prompt_module, base, torch.load(args.saved / "norga_dual.pt",
                                                                         weights_only=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
