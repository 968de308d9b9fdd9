"""norga's side of the cross-check: ``python -m bench.crosscheck.norga_side --shared ../shared --out DIR``.

Writes DIR/norga_l2p.pt (the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, 8 real CIFAR-100 test
images, and norga's L2P under the NoRGa authors' L2P setting: pool 30, top-5, length 5, class-token head, no
position embedding on prompts) and DIR/norga_dual.pt (norga's DualPrompt: G-prompt length 5 on blocks 0-1,
E-prompts of length 20 on blocks 2-4, top-1, distinct random E-prompts and keys per task).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.crosscheck.norga_cli import REPO, norga_args, weights_in
from norga.config import load_config
from norga.engine.task_loop import build_vit, resolve_config
from norga.methods import build_method

TASKS = [list(range(10 * t, 10 * t + 10)) for t in range(5)]
COMMON = ["model.preset=null", "model.name=vit_small_patch14_dinov2", "data.image_size=56", "data.num_tasks=5",
          "data.classes_per_task=10"]


def real_batch(shared: Path, classes=range(8)) -> torch.Tensor:
    """The first CIFAR-100 test image of each of ``classes``, bicubic to 56 px, ImageNet mean/std: (N, 3, 56, 56)."""
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["test_y"] == c)[0][:1] for c in classes])
    return at_56px(data["test_x"][pick])


def at_56px(images: np.ndarray) -> torch.Tensor:
    """CIFAR images (N, 32, 32, 3) uint8 -> bicubic to 56 px, clamped to [0, 1], ImageNet mean/std: (N, 3, 56, 56)
    float32 (the preprocessing every cross-check gives both sides)."""
    img = torch.tensor(images).permute(0, 3, 1, 2).float() / 255
    img = F.interpolate(img, size=56, mode="bicubic", align_corners=False).clamp(0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    return (img - mean) / std


def method_of(config: str, overrides, weights: Path):
    cfg = resolve_config(load_config(REPO / "configs" / config, COMMON + [f"model.checkpoint={weights}", *overrides]))
    vit = build_vit(cfg).eval()
    return vit, build_method(cfg, vit, TASKS, torch.device("cpu"))


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
