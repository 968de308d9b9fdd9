"""Whole training runs of the official InfLoRA / SD-LoRA code on the cross-check's small task (3 seeds per side):

    python -m crosscheck.harness.lora_reference_runs --method inflora --ref CHECKOUT --saved DIR \
        --data runs/crosscheck/cifar50_small.npz --seed 0 --out FILE.json

Run with the reference's environment as its ``*_reference_side.py`` (InfLoRA: timm 0.6.7 first on the path). DIR
holds what the method's ``*_norga_side.py`` wrote (the converted backbone is read from it). The reference's own
learner trains every task (``InfLoRA._train``; SD-LoRA's ``Learner._train``) with its own random draws (seeded as
its trainer seeds torch, numpy and random), its own transforms with their 224 px written as 56 (InfLoRA: crop,
flip, no normalisation; SD-LoRA: crop of scale 0.05-1, flip; test resize 64 + centre crop 56), batch 20, 5
epochs, shuffled loaders, the natural class order (5 tasks of 10 classes). After each task it predicts the test
images of the seen tasks with its own model (InfLoRA: ``SiNet.interface``; SD-LoRA: its network's logits over the
seen classes); FILE.json gets the accuracy matrix (%, rows: after task t) and FA.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from crosscheck.harness.reference_cli import reference_args, run_options

TASKS, CLASSES, BATCH, EPOCHS = 5, 10, 20, 5


class SmallTask(Dataset):
    """(index, transformed image, label) of the small task's ``split`` images of ``classes``, as its loaders give."""

    def __init__(self, data: dict, split: str, classes, transform):
        keep = np.isin(data[f"{split}_y"], list(classes))
        self.x, self.y, self.transform = data[f"{split}_x"][keep], data[f"{split}_y"][keep], transform

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return i, self.transform(Image.fromarray(self.x[i])), int(self.y[i])


def resized(steps, size: int = 56):
    """Its transform list with 224 px written as ``size`` (Resize of 256 / 224 * 224 as 256 / 224 * size)."""
    from torchvision import transforms as T

    for t in steps:
        if isinstance(t, (T.RandomResizedCrop, T.CenterCrop)):
            t.size = (size, size)
        elif isinstance(t, T.Resize):
            t.size = int(256 / 224 * size) if t.size == 256 else size
    return T.Compose(steps)


@torch.no_grad()
def accuracy_row(predict, data: dict, test_transform, learned: int) -> list:
    row = []
    for t in range(learned):
        loader = DataLoader(SmallTask(data, "test", range(CLASSES * t, CLASSES * (t + 1)), test_transform), 100)
        hits = sum(int((predict(x).argmax(1) == y).sum()) for _, x, y in loader)
        row.append(100.0 * hits / len(loader.dataset))
    return row


def inflora_run(ref_dir: Path, saved: Path, data: dict) -> list:
    from crosscheck.inflora.reference_side import learner, sinet
    import sys
    import types

    sys.modules.setdefault("ipdb", types.ModuleType("ipdb"))
    from methods.inflora import InfLoRA
    from models.sinet_inflora import SiNet, ViT_lora_co
    from models.vit_inflora import Attention_LoRA
    from utils.data import iCIFAR100

    ref = {"InfLoRA": InfLoRA, "SiNet": SiNet, "ViT_lora_co": ViT_lora_co, "Attention_LoRA": Attention_LoRA}
    state = torch.load(saved / "norga_inflora.pt", weights_only=False)["forward"]["state_dict"]
    net = sinet(ref, state, nn.Linear(384, CLASSES * TASKS).state_dict())  # its nn.Linear default init
    guy = learner(ref, net)
    guy.init_epoch = guy.epochs = EPOCHS
    train = resized(iCIFAR100.train_trsf + iCIFAR100.common_trsf)
    test = resized(iCIFAR100.test_trsf + iCIFAR100.common_trsf)
    matrix = []
    for t in range(TASKS):
        net.numtask, guy._cur_task = t + 1, t
        loader = DataLoader(SmallTask(data, "train", range(CLASSES * t, CLASSES * (t + 1)), train), BATCH, shuffle=True)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            guy._train(loader, None)
        guy._known_classes += CLASSES
        net.eval()
        matrix.append(accuracy_row(net.interface, data, test, t + 1))
        print(f"InfLoRA reference after task {t}: {[round(a, 1) for a in matrix[-1]]}", flush=True)
    return matrix


def sd_lora_run(ref_dir: Path, saved: Path, data: dict) -> list:
    from crosscheck.sd_lora.reference_side import lora_model, network, patch_for_cpu

    patch_for_cpu()
    from backbone.lora import LoRA_ViT_timm
    from models.sdlora import Learner
    from utils.data import build_transform
    from utils.inc_net import IncrementalNet

    ref = {"LoRA_ViT_timm": LoRA_ViT_timm, "IncrementalNet": IncrementalNet}
    state = torch.load(saved / "norga_sd_lora.pt")["forward"]["state_dict"]
    folder = str(saved / "sd_lora_reference_files") + "/"
    Path(folder).mkdir(exist_ok=True)
    guy = Learner.__new__(Learner)
    guy.__dict__.update(args={"init_lr": 8e-3, "lrate": 8e-3, "init_milestones": [60, 120, 170], "milestones": [40, 70],
                              "init_lr_decay": 0.1, "lrate_decay": 0, "init_epoch": EPOCHS, "epochs": EPOCHS,
                              "filepath": folder, "increment": CLASSES},
                        _cur_task=0, _known_classes=0, _total_classes=0, _device="cpu", _multiple_gpus=["cpu"])
    guy.update_network = lambda index=True: lora_model(ref, state, folder, guy._cur_task)  # its ViT-B/16 -> ViT-S/14
    guy._network = network(ref, guy.update_network())
    train, test = resized(build_transform(True, {})), resized(build_transform(False, {}))
    matrix = []
    for t in range(TASKS):
        guy._cur_task, guy._total_classes = t, CLASSES * (t + 1)
        guy._network.update_fc(guy._total_classes)
        loader = DataLoader(SmallTask(data, "train", range(CLASSES * t, CLASSES * (t + 1)), train), BATCH, shuffle=True)
        seen = DataLoader(SmallTask(data, "test", range(CLASSES * (t + 1)), test), BATCH)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            guy._train(loader, seen)
        guy._known_classes = guy._total_classes
        guy._network.eval()
        matrix.append(accuracy_row(lambda x: guy._network(x)["logits"], data, test, t + 1))
        print(f"SD-LoRA reference after task {t}: {[round(a, 1) for a in matrix[-1]]}", flush=True)
    return matrix


def main(argv=None) -> int:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", choices=("inflora", "sd_lora"), required=True)
        run_options(p)

    args = reference_args(__doc__, "the method's official code", "the method's *_norga_side", argv, extra)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)
    data = dict(np.load(args.data))
    run = inflora_run if args.method == "inflora" else sd_lora_run
    matrix = run(args.ref, args.saved, data)
    result = {"method": args.method, "side": "reference", "seed": args.seed, "acc_matrix": matrix,
              "FA": float(np.mean(matrix[-1]))}
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{args.method} reference seed {args.seed}: FA {result['FA']:.1f} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
