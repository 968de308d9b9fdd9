"""A whole run of the official SLCA code on the cross-check's small task (reference environment, timm 0.6.7):

    python -m crosscheck.slca.reference_run --ref CHECKOUT --saved DIR --data runs/crosscheck/cifar50_small.npz \
        --seed 1993 --out DIR/ref_slca_s1993.json

Its ``SLCA`` learner runs its own ``incremental_train`` (slow learner, ``_compute_class_mean``, alignment) and
``after_task`` for 5 tasks of 10 classes, on the ViT-S/14 at 56 px of ``slca_reference_side.py`` (DINOv2's layer
scale added in memory, norga's converted weights from DIR/norga_slca.pt). In place of its ``DataManager`` (which
reads CIFAR-100 from torchvision): the small task's images with its own ``iCIFAR100_224`` transforms at 56 px
instead of 224 (RandomResizedCrop(56, bicubic), flip, brightness jitter 63/255; test Resize(64, bicubic),
CenterCrop(56); CIFAR mean/std) and norga's class order for the seed (random.seed(seed); random.shuffle). Its
hyperparameters are the shipped ones (exps/slca/slca_cifar.json) except the protocol's 5 epochs (milestone 4) and
batch 20, as configs/crosscheck/slca.yaml. Its loaders run without worker processes; its checkpoint writing and
the accuracies it only logs (``_compute_accuracy``: every 5th epoch and every alignment epoch) are skipped; the
generator is seeded with 1 as its trainer's ``_set_random`` does. Writes the accuracy matrix
(fractions; row t = after task t) to --out.
"""
from __future__ import annotations

import json
import random

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from crosscheck.harness.reference_cli import reference_args, run_options
from crosscheck.slca.reference_side import network

CIFAR_MEAN, CIFAR_STD = (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)  # its iCIFAR100 common_trsf


class SmallTask:
    """Its DataManager's interface over the small task: labels mapped to positions in the class order."""

    dataset_name = "cifar100_224"

    def __init__(self, data: dict, order: list):
        position = {c: i for i, c in enumerate(order)}
        self.x = {s: data[f"{s}_x"] for s in ("train", "test")}
        self.y = {s: np.array([position[int(c)] for c in data[f"{s}_y"]]) for s in ("train", "test")}
        self.trsf = {"train": T.Compose([T.RandomResizedCrop(56, interpolation=3), T.RandomHorizontalFlip(),
                                         T.ColorJitter(brightness=63 / 255)]),
                     "test": T.Compose([T.Resize(64, interpolation=3), T.CenterCrop(56)])}
        self.common = T.Compose([T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])

    def get_task_size(self, task: int) -> int:
        return 10

    def get_dataset(self, indices, source, mode, appendent=None, ret_data=False, with_raw=False, with_noise=False):
        keep = np.isin(self.y[source], indices)
        x, y, trsf = self.x[source][keep], self.y[source][keep], self.trsf[mode]
        dataset = [(i, x[i], int(y[i])) for i in range(len(y))]
        common = self.common

        class Images(torch.utils.data.Dataset):
            def __len__(self):
                return len(dataset)

            def __getitem__(self, i):
                idx, img, label = dataset[i]
                return idx, common(trsf(Image.fromarray(img))), label

        return (x, y, Images()) if ret_data else Images()


def accuracy_row(net, task_data: SmallTask, task: int) -> list:
    net.eval()
    row = []
    for t in range(task + 1):
        loader = DataLoader(task_data.get_dataset(np.arange(10 * t, 10 * t + 10), "test", "test"), batch_size=100)
        with torch.no_grad():
            hits = sum(int((net(x)["logits"].argmax(1) == y).sum()) for _, x, y in loader)
        row.append(hits / len(loader.dataset))
    return row


def main(argv=None) -> int:
    args = reference_args(__doc__, "GengDavid/SLCA", "crosscheck.slca.norga_side", argv, run_options)
    import models.base as base
    import models.slca as module
    from convs.vits import VisionTransformer
    from utils.inc_net import FinetuneIncrementalNet

    loader = lambda dataset, **kw: DataLoader(dataset, **{**kw, "num_workers": 0})  # noqa: E731
    base.DataLoader = module.DataLoader = loader
    module.epochs, module.milestones, module.batch_size = 5, [4], 20
    module.ca_epochs = 5  # slca_cifar.json
    order = list(range(50))
    random.seed(args.seed)
    random.shuffle(order)
    torch.manual_seed(1)  # its trainer's _set_random
    np.random.seed(args.seed)
    saved = torch.load(args.saved / "norga_slca.pt", weights_only=False)
    net = network({"VisionTransformer": VisionTransformer, "FinetuneIncrementalNet": FinetuneIncrementalNet},
                  saved["task0"]["backbone_before"])
    slca = module.SLCA.__new__(module.SLCA)
    slca.__dict__.update(_network=net, _cur_task=-1, _known_classes=0, _total_classes=0, _device="cpu",
                         _multiple_gpus=["cpu"], bcb_lrscale=1 / 100, fix_bcb=False, logit_norm=0.1, task_sizes=[],
                         topk=5, log_path="logs/slca", model_prefix="xc", seed=args.seed, save_before_ca=False,
                         _data_memory=np.array([]), _targets_memory=np.array([]), _class_means=None)
    slca.save_checkpoint = lambda *a, **k: None
    slca._compute_accuracy = lambda *a, **k: 0.0  # only logged (every 5th epoch, every alignment epoch)
    task_data = SmallTask(dict(np.load(args.data)), order)
    matrix = []
    for task in range(5):
        slca.incremental_train(task_data)
        matrix.append(accuracy_row(net, task_data, task))
        slca.after_task()
        print(f"task {task}: {[round(a, 3) for a in matrix[-1]]}", flush=True)
    args.out.write_text(json.dumps({"seed": args.seed, "order": order, "acc_matrix": matrix}) + "\n")
    print(f"FA {100 * np.mean(matrix[-1]):.1f} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
