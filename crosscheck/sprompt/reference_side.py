"""The reference side of the S-Prompts cross-check, run with a reference environment (timm 0.6.7):

    python -m crosscheck.sprompt.reference_side --ref CHECKOUT --saved DIR

CHECKOUT is iamwangyabin/S-Prompts, DIR what ``python -m crosscheck.sprompt.norga_side`` wrote. Its
``SiNet`` is assembled around its own ``ViT_Prompts`` built as DINOv2 ViT-S/14 at 56 px (its VisionTransformer has
layer scale) instead of downloading its ViT-B: prompt pool = norga's prompts (one ``nn.Linear(D, L)`` weight per
task), classifier pool = norga's common head cut into one 10-class classifier per task, centroids = norga's. Its own
``SPrompts._eval_cnn`` (nearest centroid by its distance, ``interface`` for the selected prompt and classifier)
then predicts the batch. Printed: frozen features, the selected task per sample, the prompted features, the logits
within the selected task and the predictions against norga's. Nothing is patched or copied.
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, reference_args


def sinet(ref: dict, saved: dict):
    encoder = ref["ViT_Prompts"](img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, num_classes=0,
                                 init_values=1e-5, norm_layer=partial(nn.LayerNorm, eps=1e-6))
    missing, unexpected = encoder.load_state_dict(saved["state_dict"], strict=False)
    # its VisionTransformer also holds cls_token_grow / pos_embed_grow, which ViT_Prompts.forward never reads
    assert sorted(missing) == ["cls_token_grow", "pos_embed_grow"] and not unexpected, (missing, unexpected)
    net = ref["SiNet"].__new__(ref["SiNet"])
    nn.Module.__init__(net)
    net.image_encoder, net.class_num, net.numtask = encoder.eval(), 10, len(saved["prompts"])
    net.prompt_pool = nn.ModuleList(nn.Linear(384, p.shape[0], bias=False) for p in saved["prompts"])
    net.classifier_pool = nn.ModuleList(nn.Linear(384, 10) for _ in saved["prompts"])
    head = saved["head"]
    with torch.no_grad():
        for t, (prompt, classifier) in enumerate(zip(net.prompt_pool, net.classifier_pool)):
            prompt.weight.copy_(saved["prompts"][t])
            classifier.weight.copy_(head["weight"][10 * t:10 * t + 10])
            classifier.bias.copy_(head["bias"][10 * t:10 * t + 10])
    return net.eval()


@torch.no_grad()
def check(ref: dict, saved: dict) -> None:
    net, x = sinet(ref, saved), saved["images"]
    print("S-Prompts frozen class-token features, max |ref - norga|:",
          f"{biggest(net.image_encoder(x), saved['frozen']):.1e}")
    learner = SimpleNamespace(_network=net, _device="cpu", all_keys=list(saved["centroids"]), topk=1)
    predicted, _ = ref["SPrompts"]._eval_cnn(learner, [(None, x, torch.zeros(len(x), dtype=torch.long))])
    selected = torch.stack([i.weight for i in net.prompt_pool])
    feature = net.extract_vector(x)
    dist = torch.stack(  # the tasks its _eval_cnn chooses, by its formula (to compare the features)
[torch.stack([(((feature - c) ** 2) ** 0.5).sum(1) for c in centres]).min(0)[0]
                        for centres in learner.all_keys])
    tasks = dist.min(0)[1]
    features = net.image_encoder(x, selected[tasks])
    print("S-Prompts same task selected per sample:", bool(torch.equal(tasks, saved["tasks"])),
          f"({len(set(tasks.tolist()))} different tasks among {len(x)} samples)")
    print("S-Prompts prompted features:", f"{biggest(features, saved['features']):.1e}",
          "| logits within the selected task:", f"{biggest(net.interface(x, tasks), saved['logits_in_task']):.1e}",
          f"| prompt effect max |prompted - frozen| {biggest(features, saved['frozen']):.2f}")
    print("S-Prompts predictions of its _eval_cnn equal norga's:",
          bool(torch.equal(torch.as_tensor(predicted[:, 0]), saved["predicted"])))


def main(argv=None) -> int:
    args = reference_args(__doc__, "iamwangyabin/S-Prompts", "crosscheck.sprompt.norga_side", argv)
    from methods.sprompt import SPrompts
    from models.sinet import SiNet, ViT_Prompts

    check({"SiNet": SiNet, "ViT_Prompts": ViT_Prompts, "SPrompts": SPrompts},
          torch.load(args.saved / "norga_sprompt.pt", weights_only=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
