"""norga's side of the S-Prompts cross-check: ``python -m crosscheck.sprompt.norga_side --out DIR``.

Writes DIR/norga_sprompt.pt for ``crosscheck/sprompt/reference_side.py``: the DINOv2 ViT-S/14 of ../shared
converted by timm to 56 px, 16 real CIFAR-100 test images (classes 0, 3, ..., 45; ImageNet mean/std), and norga's
``sprompt`` with 5 learned tasks of 10 classes: random prompts of 10 tokens per task (nn.Linear's init range, as
the official code), 5 centroids per task placed near real normalised features, and the common head; norga's frozen
features, the task selected per sample (nearest centroid, L1), the prompted features with each sample's selected
prompt, the logits within the selected task and the predicted class.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import method_of, real_batch


@torch.no_grad()
def sprompt(x: torch.Tensor, weights: Path) -> dict:
    vit, method = method_of("cifar100_sprompt.yaml", ["method.prompt_length=10", "method.centroids_per_task=5"],
                            weights)
    g = torch.Generator().manual_seed(2)
    bound = method.prompts.shape[-1] ** -0.5
    method.prompts.copy_((2 * torch.rand(method.prompts.shape, generator=g) - 1) * bound)
    frozen = method.model(x)
    near = F.normalize(frozen, dim=-1)[torch.randint(len(x), method.centroids.shape[:2], generator=g)]
    method.centroids.copy_(near + 0.02 * torch.randn(method.centroids.shape, generator=g))
    method.learned = method.num_tasks
    tasks = method.select_tasks(frozen)
    features = torch.cat([method.model(x[i:i + 1], method.tokens(method.prompts[t])) for i, t in enumerate(tasks)])
    in_task = method.head(features).view(len(x), method.num_tasks, -1)[torch.arange(len(x)), tasks]  # (B, 10)
    return {"state_dict": {k: v.float() for k, v in vit.state_dict().items()}, "images": x, "frozen": frozen,
            "prompts": method.prompts.clone(), "centroids": method.centroids.clone(), "head": method.head.state_dict(),
            "tasks": tasks, "features": features, "logits_in_task": in_task, "predicted": in_task.argmax(1)}


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_sprompt.pt",
                          lambda shared: sprompt(real_batch(shared, classes=range(0, 48, 3)), weights_in(shared)),
                          argv, seed=None)


if __name__ == "__main__":
    raise SystemExit(main())
