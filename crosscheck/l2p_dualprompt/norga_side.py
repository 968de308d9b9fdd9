"""norga's side of the cross-check: ``python -m crosscheck.l2p_dualprompt.norga_side --shared ../shared --out DIR``.

Writes DIR/norga_l2p.pt (the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, 8 real CIFAR-100 test
images, and norga's L2P under the NoRGa authors' L2P setting: pool 30, top-5, length 5, class-token head, no
position embedding on prompts) and DIR/norga_dual.pt (norga's DualPrompt: G-prompt length 5 on blocks 0-1,
E-prompts of length 20 on blocks 2-4, top-1, distinct random E-prompts and keys per task).
"""
from __future__ import annotations

from pathlib import Path

import torch

from crosscheck.harness.norga_cli import norga_args, weights_in
from crosscheck.harness.norga_inputs import TASKS, method_of, real_batch


@torch.no_grad()
def l2p(x: torch.Tensor, weights: Path) -> dict:
    vit, method = method_of("cifar100_l2p.yaml", ["method.prompt_pos_embed=none", "method.head_pool=token",
                                                  "method.pool_size=30", "method.top_k=5", "method.prompt_length=5"],
                            weights)
    frozen = method.model(x)
    logits, sim, chosen = method.forward_selected(x, frozen)
    return {"state_dict": {k: v.float() for k, v in vit.state_dict().items()}, "images": x, "frozen": frozen,
            "prompts": method.prompts.detach(), "keys": method.keys.detach(), "head": method.head.state_dict(),
            "similarity": sim, "chosen": chosen, "prompted": method.model(x, method.tokens(chosen)), "logits": logits}


@torch.no_grad()
def dualprompt(x: torch.Tensor, weights: Path) -> dict:
    _, method = method_of("cifar100_dualprompt.yaml", ["method.e_prompt_length=20"], weights)
    method.learned = len(TASKS)  # every task's key competes (the reference matches over its whole pool)
    g = torch.Generator().manual_seed(1)
    method.e_prompts.copy_(2 * torch.rand(method.e_prompts.shape, generator=g) - 1)
    method.keys.copy_(2 * torch.rand(method.keys.shape, generator=g) - 1)
    query = method.model(x)
    tasks = method.select_tasks(query)
    feats = method.model(x, method.prompts(method.e_prompts[tasks]))
    return {"g_prompt": method.g_prompt.detach(), "e_prompts": method.e_prompts, "keys": method.keys,
            "head": method.head.state_dict(), "tasks": tasks, "features": feats, "logits": method.head(feats),
            "query": query, "g_layers": method.g_layers, "e_layers": method.e_layers}


def main(argv=None) -> int:
    args = norga_args(__doc__, argv)
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    weights = weights_in(args.shared)
    x = real_batch(args.shared)
    torch.save(l2p(x, weights), args.out / "norga_l2p.pt")
    torch.save(dualprompt(x, weights), args.out / "norga_dual.pt")
    print(f"wrote {args.out / 'norga_l2p.pt'} and {args.out / 'norga_dual.pt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
