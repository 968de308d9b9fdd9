"""norga's side of the SLCA cross-check: ``python -m crosscheck.slca.norga_side --out DIR``.

Writes DIR/norga_slca.pt for ``crosscheck/slca/reference_side.py``: the DINOv2 ViT-S/14 of ../shared converted
by timm to 56 px and norga's ``slca`` (configs/cifar100_slca.yaml; 5 tasks of 10 classes, 1 slow-learner epoch,
2 alignment epochs) on real CIFAR-100 images of the small task (56 px, ImageNet mean/std, no augmentation):

* forward: 16 test images (classes 0, 3, ..., 45) -> features and task 0's head logits at the heads' initial values;
* task 0: three fixed training batches of 16 (the first 48 training images of classes 0-9 in file order) through
  the slow learner, then the class statistics of classes 0-9 from their 20 training images each;
* task 1: the same for classes 10-19, then one classifier alignment; the alignment's sampled features and
  permutations are recorded so the reference can be fed the same draws.

Saved: every tensor before and after, the heads' initial values, the statistics, the draws, the aligned heads.
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from crosscheck.harness.norga_cli import run_norga_side, weights_in
from crosscheck.harness.norga_inputs import at_56px, method_of, real_batch
from crosscheck.harness.small_task import first_per_class
from norga.methods.base import TaskLoaders
from norga.methods.hooks import HOOKS
from norga.methods.slca_heads import TaskHeads

OVERRIDES = ["method.epochs=1", "method.batch_size=16", "method.ca_epochs=2"]


def train_images(shared: Path, classes) -> tuple:
    """The small task's 20 training images of each of ``classes`` in file order, 56 px, ImageNet mean/std."""
    data = first_per_class(np.load(shared / "data" / "cifar100.npz"), max(classes) + 1, {"train": 20})
    keep = np.isin(data["train_y"], list(classes))
    return at_56px(data["train_x"][keep]), torch.tensor(data["train_y"][keep])


def recorder(draws: list):
    """A context in which each of SLCA's alignment epochs records its samples (N, D), labels and the permutation
    its batches will be shuffled by (the hook point ``alignment_samples`` of :mod:`norga.methods.hooks`)."""
    def record(feats, labels, generator):
        twin = torch.Generator().set_state(generator.get_state())
        draws.append({"samples": feats.clone(), "labels": labels.clone(),
                      "order": torch.randperm(len(labels), generator=twin)})

    return HOOKS.observed("alignment_samples", record)


def learn(method, task: int, shared: Path) -> dict:
    """Task ``task``: the head's initial values, 3 slow-learner batches, statistics; tensors before and after."""
    x, y = train_images(shared, range(10 * task, 10 * task + 10))
    before = copy.deepcopy(method.model.vit.state_dict())
    torch.manual_seed(100 + task)  # the new head's init: the first draw of the global generator
    state = torch.random.get_rng_state()
    method.slow_learner(task, TaskLoaders(train=[(x[i:i + 16], y[i:i + 16]) for i in (0, 16, 32)],
                                          train_plain=None, test=None))
    init = TaskHeads(method.model.embed_dim, method.task_classes)
    for _ in range(task):
        init.add("cpu")  # placeholders for the earlier tasks' heads
    torch.random.set_rng_state(state)
    head = init.add("cpu")  # the same draws as the slow learner's new head
    method.store_statistics(task, TaskLoaders(train=None, train_plain=[(x, y)], test=None))
    stats = {c: method.store.stats[c] for c in method.task_classes[task]}
    return {"images": x, "labels": y, "backbone_before": before,
            "backbone_after": copy.deepcopy(method.model.vit.state_dict()), "head_init": head.state_dict(),
            "heads_after": copy.deepcopy(method.heads.state_dict()),
            "means": torch.stack([s["mean"] for s in stats.values()]),
            "covs": torch.stack([s["chol"] @ s["chol"].T for s in stats.values()])}


def slca(shared: Path, weights: Path) -> dict:
    _, method = method_of("cifar100_slca.yaml", OVERRIDES, weights)
    x = real_batch(shared, classes=range(0, 48, 3))
    out = {"forward_images": x}
    with torch.no_grad():
        torch.manual_seed(100)
        probe = TaskHeads(method.model.embed_dim, method.task_classes).add("cpu")
        out["forward_features"] = method.model.eval()(x)
        out["forward_logits"] = probe(out["forward_features"])
    out["task0"] = learn(method, 0, shared)
    out["task1"] = learn(method, 1, shared)
    draws: list = []
    method.aligned = copy.deepcopy(method.heads)
    with recorder(draws):
        method.align(1)
    out.update(draws=draws, aligned=copy.deepcopy(method.aligned.state_dict()),
               config={k: getattr(method.c, k) for k in ("lr", "backbone_lr_scale", "weight_decay", "momentum",
                                                          "ca_lr", "ca_epochs", "ca_samples_per_class",
                                                          "ca_logit_norm", "ca_mean_shrink")})
    return out


def main(argv=None) -> int:
    return run_norga_side(__doc__, "norga_slca.pt", lambda shared: slca(shared, weights_in(shared)), argv, seed=None,
                          one_thread=True)


if __name__ == "__main__":
    raise SystemExit(main())
