"""norga's side of the MOS cross-check: ``python -m crosscheck.mos.norga_side --out DIR``.

Writes DIR/norga_mos.pt for ``crosscheck/mos/reference_side.py``: the DINOv2 ViT-S/14 of ../shared converted by
timm to 56 px (its backbone state dict, blocks unwrapped), norga's ``mos`` on 5 tasks of 10 classes with adapter
dropout 0 (the random masks could not be shared), and two checks:

* forward: 5 random saved adapters W_0..W_4 (r = 16, entries N(0, 0.05^2)) saved as norga saves them
  (``test_adapters: prefix_mean``), random prototypes (50, D) and head; 16 real CIFAR-100 test images (classes
  0, 3, ..., 45); the features under every test adapter, the prototype logits, the retrieved adapter per sample,
  the ensemble scores and the predicted classes;
* training: task 2 (classes 20-29) after W_0, W_1 were saved, the trained adapter at a random W, stored statistics
  for classes 0-19 (their means enter the regulariser), a random head; three fixed batches of 8 real CIFAR-100
  training images of classes 20-27 through ``train_adapter`` (1 epoch, SGD, lr 0.03, the per-block merges); the
  trained adapter and head before and after;
* statistics: task 2 after W_0, W_1 were saved, the trained adapter at a random W_2, saved as ``learn_task`` saves
  it; then the class statistics' forwards (``stats_adapter: merging``, batch size 8, so 24 images per forward) over
  30 real CIFAR-100 training images of each of classes 20-22 (two forwards per class): the features and labels,
  the adapter they leave behind, and for comparison the features under norga's earlier target (S_3 / 2: the sums
  after W_2 was added, what norga used before 2026-11-29).
"""
from __future__ import annotations

from pathlib import Path

import copy

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from crosscheck.harness.adapters_norga import backbone_state
from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import at_56px, method_of, real_batch
from norga.methods.base import TestBatch
from norga.toolkit.feature_cache import FeatureCache

OVERRIDES = ["method.adapter_dropout=0", "method.epochs=1"]
NAMES = ("down.weight", "down.bias", "up.weight", "up.bias")


def random_adapters(method, g: torch.Generator) -> list:
    """One random adapter per block: a list of state dicts {down.weight (r, D), down.bias (r,), up.weight (D, r),
    up.bias (D,)}, entries N(0, 0.05^2)."""
    return [{k: torch.randn(v.shape, generator=g) * 0.05 for k, v in t[0].state_dict().items()} for t in method.tuned]


def load_current(method, adapters: list) -> None:
    for t, state in zip(method.tuned, adapters):
        t[0].load_state_dict(state)


def save_tasks(method, snapshots: list) -> None:
    """Save W_0, W_1, ... as norga does at the end of each task (test adapter, then the sum)."""
    for k, adapters in enumerate(snapshots):
        load_current(method, adapters)
        method.save_test_adapter(k)
    method.learned_tasks = len(snapshots)


@torch.no_grad()
def forward_check(weights: Path, shared: Path) -> dict:
    vit, method = method_of("cifar100_mos.yaml", OVERRIDES, weights)
    g = torch.Generator().manual_seed(3)
    snapshots = [random_adapters(method, g) for _ in range(5)]
    save_tasks(method, snapshots)
    method.prototypes.copy_(torch.randn(method.prototypes.shape, generator=g))
    method.head.weight.copy_(torch.randn(method.head.weight.shape, generator=g) * 0.1)
    method.head.bias.copy_(torch.randn(method.head.bias.shape, generator=g) * 0.1)
    x = real_batch(shared, classes=range(0, 48, 3))
    batch = TestBatch(images=x, task=0, index=torch.arange(len(x)), size=len(x), seen=torch.ones(50, dtype=torch.bool))
    cache = FeatureCache()
    prediction = method.predict(batch, cache)
    feats = torch.stack([cache.slot(0, 1 + k, len(x), 384)[0] for k in range(5)], 1)
    frozen = method.model(x)
    return {"state_dict": backbone_state(vit), "images": x, "snapshots": snapshots,
            "prototypes": method.prototypes.clone(),
            "head": {k: v.clone() for k, v in method.head.state_dict().items()},
            "frozen": frozen, "features": feats, "prototype_logits": method.prototype_logits(feats[:, 0]),
            "scores": prediction.logits, "chosen": prediction.task_ids, "predicted": prediction.logits.argmax(1)}


def train_batches(shared: Path) -> list:
    """Three batches of 8: the first 3 CIFAR-100 training images of classes 20-27, 56 px, in a fixed shuffled order."""
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["train_y"] == c)[0][:3] for c in range(20, 28)])
    pick = pick[torch.randperm(len(pick), generator=torch.Generator().manual_seed(4)).numpy()]
    x, y = at_56px(data["train_x"][pick]), torch.as_tensor(data["train_y"][pick]).long()
    return [(x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8)]


def training_check(weights: Path, shared: Path) -> dict:
    _, method = method_of("cifar100_mos.yaml", OVERRIDES, weights)
    g = torch.Generator().manual_seed(5)
    snapshots = [random_adapters(method, g) for _ in range(2)]
    save_tasks(method, snapshots)
    current = random_adapters(method, g)
    load_current(method, current)
    for c in range(20):
        method.store.add(c, torch.randn(4, 384, generator=g) + torch.randn(384, generator=g))
    with torch.no_grad():
        method.head.weight.copy_(torch.randn(method.head.weight.shape, generator=g) * 0.02)
    head_before = {k: v.clone() for k, v in method.head.state_dict().items()}
    batches = train_batches(shared)
    method.train_adapter(2, batches)
    return {"snapshots": snapshots, "current_before": current, "head_before": head_before, "batches": batches,
            "means": {c: method.store.means([c])[0] for c in range(20)},
            "current_after": [{k: v.clone() for k, v in t[0].state_dict().items()} for t in method.tuned],
            "head_after": {k: v.clone() for k, v in method.head.state_dict().items()}}


class Images(Dataset):
    """(image (3, 56, 56), label) pairs with ``labels`` (N,), as norga's datasets carry them."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.labels = x, y

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.x[i], int(self.labels[i])


def statistics_check(weights: Path, shared: Path) -> dict:
    _, method = method_of("cifar100_mos.yaml", [*OVERRIDES, "method.batch_size=8"], weights)
    g = torch.Generator().manual_seed(6)
    snapshots = [random_adapters(method, g) for _ in range(2)]
    save_tasks(method, snapshots)
    current = random_adapters(method, g)
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["train_y"] == c)[0][:30] for c in (20, 21, 22)])
    images = Images(at_56px(data["train_x"][pick]), torch.as_tensor(data["train_y"][pick]).long())
    out = {"snapshots": snapshots, "current_before": current, "images": images.x, "labels": images.labels}
    sums_before = copy.deepcopy(method.sums.state_dict())  # S_2
    for target in ("earlier", "running"):
        method.sums.load_state_dict(sums_before)
        load_current(method, current)
        earlier = copy.deepcopy(method.sums)
        method.save_test_adapter(2)  # W_2's test adapter; sums += W_2
        feats, labels = method.statistics_features(2, DataLoader(images, batch_size=64),
                                                   earlier if target == "earlier" else method.sums)
        out[target] = {"features": feats, "labels": labels,
                       "current_after": [{k: v.clone() for k, v in t[0].state_dict().items()} for t in method.tuned]}
    return out


def main(argv=None) -> int:
    def build(shared: Path) -> dict:
        weights = weights_in(shared)
        return {"forward": forward_check(weights, shared), "training": training_check(weights, shared),
                "statistics": statistics_check(weights, shared)}

    return run_norga_side(__doc__, "norga_mos.pt", build, argv, seed=None)


if __name__ == "__main__":
    raise SystemExit(main())
