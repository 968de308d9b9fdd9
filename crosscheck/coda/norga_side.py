"""norga's side of the CODA-Prompt cross-check: ``python -m crosscheck.coda.norga_side --out DIR``.

Writes DIR/norga_coda.pt for ``crosscheck/coda/reference_side.py``:

* **forward**: the DINOv2 ViT-S/14 of ../shared converted by timm to 56 px, 16 real CIFAR-100 test images through
  CODA-Prompt's CIFAR test transform (Resize(56), ToTensor, no normalisation: ``data.transforms: coda_cifar``),
  norga's ``coda`` with the official values (100 components on blocks 0-4, length 8 = 4 prefix keys + 4 values,
  5 tasks of 20 components) and pools drawn for all tasks plus noise; the frozen queries, block 0's prefixes, the
  prompted features and the logits after 1, 3 and 5 learned tasks;
* **training steps**: from norga's initial pools (all tasks drawn at once, ``init: orthogonal``), one epoch of three
  fixed batches of 20 training images of classes 0-9 (the same test transform, so no augmentation) at Adam 1e-3;
  the initial and trained components, keys, attention vectors and head.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import method_of
from norga.data.transforms import build_transforms
from norga.methods.base import TaskLoaders

CODA = ["method.pool_size=100", "method.prompt_length=8", "method.prompt_layers=[0,1,2,3,4]", "method.ortho_mu=0.0",
        "method.head_init=pytorch"]


def images(shared: Path, split: str, pick: np.ndarray) -> torch.Tensor:
    data = np.load(shared / "data" / "cifar100.npz")
    test = build_transforms(56, (0.0,) * 3, (1.0,) * 3, False, "coda_cifar")
    return torch.stack([test(Image.fromarray(data[f"{split}_x"][i])) for i in pick])


@torch.no_grad()
def forward_check(shared: Path, weights: Path) -> dict:
    vit, method = method_of("cifar100_coda.yaml", CODA, weights)
    x = images(shared, "test", np.arange(0, 496, 31))
    g = torch.Generator().manual_seed(123)
    for t in range(method.num_tasks):
        method.draw_orthonormal(t * method.per_task, (t + 1) * method.per_task, g)
    for pool in method.pools.values():
        pool += 0.05 * torch.randn(pool.shape, generator=g)  # away from the draw, as after training
    query = method.model(x)
    out = {"state_dict": {k: v.float() for k, v in vit.state_dict().items()}, "images": x, "query": query,
           "pools": {k: v.clone() for k, v in method.pools.items()}, "head": method.head.state_dict(), "after": {}}
    for learned in (1, 3, 5):
        prompts = method.prompts(query, *method.in_use(learned))
        features = method.model(x, prompts)
        out["after"][learned] = {"prefix0": prompts.prefixes[0], "features": features,
                                 "logits": method.head(features)}
    return out


def training_steps(shared: Path, weights: Path) -> dict:
    _, method = method_of("cifar100_coda.yaml", CODA + ["method.init=orthogonal", "method.epochs=1",
                                                        "method.batch_size=20", "method.lr=0.001"], weights)
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["train_y"] == c)[0][:6] for c in range(10)])
    pick = pick[np.random.RandomState(0).permutation(len(pick))]
    x, y = images(shared, "train", pick), torch.tensor(data["train_y"][pick], dtype=torch.long)
    initial = {k: v.clone() for k, v in method.pools.items()}
    initial_head = {k: v.clone() for k, v in method.head.state_dict().items()}
    method.learn_task(0, TaskLoaders([(x[i:i + 20], y[i:i + 20]) for i in range(0, 60, 20)], None, None))
    return {"images": x, "labels": y, "per_task": method.per_task, "initial": initial, "initial_head": initial_head,
            "trained": {k: v.clone() for k, v in method.pools.items()},
            "trained_head": {k: v.clone() for k, v in method.head.state_dict().items()}}


def main(argv=None) -> int:
    def build(shared: Path) -> dict:
        weights = weights_in(shared)
        return {"forward": forward_check(shared, weights), "steps": training_steps(shared, weights)}

    return run_norga_side(__doc__, "norga_coda.pt", build, argv)


if __name__ == "__main__":
    raise SystemExit(main())
