"""Training runs of RanPAC, APER and EASE's official code on the cross-check's small task, run in the reference
environment (timm 0.6.13 first on the path):

    python -m crosscheck.harness.pilot_runs_reference --method aper --ref CHECKOUT --saved DIR \
        --data runs/crosscheck/cifar50_small.npz --seed 1993 --out FILE.json

CHECKOUT is the method's official code (as in ``{ranpac,aper,ease}_reference_side.py``, whose ``make_learner``
builds its ``Learner`` around the ViT-S/14 at 56 px with the backbone in DIR/norga_<method>.pt), then its own
loop of its ``trainer.py``: ``incremental_train`` and ``after_task`` for 5 tasks of 10 classes, evaluated after
every task on each learned task's test images through its ``_eval_cnn`` (top-1). Its data manager is replaced by
a stand-in with the same interface on the small task: the class order of its ``DataManager``
(``np.random.seed(seed); np.random.permutation``), labels renumbered by that order, and its CIFAR transforms at
56 px instead of 224 (train: random resized crop (0.05, 1), ratio (3/4, 4/3), flip; test and prototypes: resize
to 64 bicubic, centre crop 56; no normalisation). RanPAC's own CIFAR test transform (resize to the input size,
no crop) is the only one not followed: norga has no recipe for it, so both sides use the crop. Changes in
memory: its data loaders' ``num_workers`` 8 -> 0, and those of the forward checks. Written: the accuracy matrix
(rows: after task t; columns: task j <= t) in %.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

from crosscheck.harness.reference_cli import reference_args, write_result

EPOCHS, BATCH, TASKS, PER_TASK = 5, 20, 5, 10


def transforms(train: bool) -> T.Compose:
    if train:
        return T.Compose([T.RandomResizedCrop(56, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
                          T.RandomHorizontalFlip(p=0.5), T.ToTensor()])
    return T.Compose([T.Resize(64, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(56), T.ToTensor()])


class Split(torch.utils.data.Dataset):
    """(index, image, label) as its DummyDataset yields them; ``labels`` as its learners read them."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, train: bool):
        self.images, self.labels, self.trsf = images, labels, transforms(train)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return i, self.trsf(Image.fromarray(self.images[i])), int(self.labels[i])


class SmallTask:
    """The interface of its ``DataManager`` on the small task: 5 tasks of 10 classes in its seeded order."""

    def __init__(self, npz: Path, seed: int):
        data = np.load(npz)
        np.random.seed(seed)
        self.order = np.random.permutation(50).tolist()
        rank = np.argsort(self.order)  # original class -> position in the order
        self.data = {split: (data[f"{split}_x"], rank[data[f"{split}_y"]]) for split in ("train", "test")}
        self.nb_tasks = TASKS

    def get_task_size(self, task: int) -> int:
        return PER_TASK

    def get_total_classnum(self) -> int:
        return TASKS * PER_TASK

    def get_dataset(self, indices, source: str, mode: str, ret_data: bool = False, **_):
        """The split of classes ``indices``; with ``ret_data`` (images, labels, split) as its DataManager returns."""
        x, y = self.data[source]
        keep = np.isin(y, indices)
        split = Split(x[keep], y[keep], mode == "train")
        return (split.images, split.labels, split) if ret_data else split


def learner_of(method: str, saved: dict):
    """Its Learner, built by the method's reference-side ``make_learner`` with the official values, 5 epochs and
    batch 20."""
    side = importlib.import_module(f"{method}_reference_side")
    ref, state = side.namespace(), saved["forward"]["state_dict"]
    if method == "ranpac":
        return side.make_learner(ref, state, 2000, tuned_epoch=EPOCHS, batch_size=BATCH)
    if method == "aper":
        return side.make_learner(ref, state, tuned_epoch=EPOCHS, batch_size=BATCH)
    return side.make_learner(ref, state, init_epochs=EPOCHS, later_epochs=EPOCHS, batch_size=BATCH)


def accuracy_matrix(learner, data: SmallTask) -> list:
    """Its trainer's loop; after task t, its top-1 accuracy (%) on each learned task's test images."""
    matrix = []
    for t in range(TASKS):
        learner.incremental_train(data)
        row = []
        for j in range(t + 1):
            loader = torch.utils.data.DataLoader(data.get_dataset(np.arange(j * PER_TASK, (j + 1) * PER_TASK),
                                                                  "test", "test"), batch_size=100, shuffle=False)
            pred, true = learner._eval_cnn(loader)
            row.append(float((pred[:, 0] == true).mean() * 100))
        matrix.append(row)
        print(f"task {t}: {[round(a, 1) for a in row]}", flush=True)
        learner.after_task()
    return matrix


def main(argv=None) -> int:
    def extra(p):
        p.add_argument("--method", choices=("ranpac", "aper", "ease"), required=True)
        p.add_argument("--data", type=Path, default=Path("runs/crosscheck/cifar50_small.npz"))
        p.add_argument("--seed", type=int, default=1993)
        p.add_argument("--out", type=Path, required=True)

    args = reference_args(__doc__, "the method's official code", "crosscheck.<method>.norga_side", argv, extra)
    from crosscheck.harness.adapters_reference import cpu_only
    cpu_only()
    saved = torch.load(args.saved / f"norga_{args.method}.pt", weights_only=False)
    torch.manual_seed(args.seed)  # its trainer's _set_random, before the data manager and the learner
    data = SmallTask(args.data, args.seed)
    learner = learner_of(args.method, saved)
    matrix = accuracy_matrix(learner, data)
    final = matrix[-1]
    result = {"method": args.method, "seed": args.seed, "matrix": matrix, "FA": sum(final) / len(final)}
    write_result(args.out, result)
    print(f"{args.method} seed {args.seed}: FA {result['FA']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
