"""A deliberately weak backbone for issue #33's third regime: a small ViT trained from scratch on CIFAR-100
classes 50-99 only, so its frozen features are weak on classes 0-49 (as ImageNet-R is for ViT-B/16).

    python -m studies.weak_backbone.build --shared ../shared --out runs/bench_data/weak_vit     # resumable
    python -m studies.weak_backbone.build --shared ../shared --out runs/bench_data/weak_vit --report-only

Architecture (timm, never forked): ``vit_tiny_patch16_224`` with ``img_size=32, patch_size=4, depth=6,
embed_dim=96, num_heads=3`` (D = 96, 3 heads of 32, 64 patches + the class token, 0.7 M parameters: about
0.26 GFLOP per image for a training step, sized so that the whole training fits about an hour on 2 CPU cores).
Training, fixed before the first run: classes 50-99 of the real CIFAR-100 train split (500 images each, labels
c - 50), AdamW lr 1e-3 (weight decay 0.05) with a cosine schedule over ``--epochs`` (20) epochs and 1 warm-up
epoch, batch 128, cross-entropy with label smoothing 0.1, random crop
(4-pixel zero padding) and horizontal flip drawn from a generator seeded by ``--seed`` (0); inputs normalised with
timm's mean/std of the architecture (0.5, 0.5).

Writes into ``--out``: ``state.pt`` (model, optimiser, epoch, generator; rewritten atomically after every epoch,
so a killed run resumes at the next epoch), ``log.jsonl`` (one line per epoch), ``backbone.pt`` (the state dict
without the head, what ``model.checkpoint`` loads strictly with ``model.name: vit_tiny_patch16_224`` and
``model.timm_kwargs: {patch_size: 4, depth: 6, embed_dim: 96, num_heads: 3}`` at ``data.image_size: 32``) and
``report.json``: its sha256, the test accuracy on classes 50-99 (its own head) and a linear probe's on classes 0-49
(scikit-learn logistic regression on frozen class-token features of all 500 train / 100 test images per class). The
weights are never committed; docs/results.md quotes the checksum and the accuracies from report.json.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import time
from pathlib import Path
from typing import Tuple

import numpy as np
import timm
import torch
import torch.nn.functional as F

from norga.files import atomic_write_bytes, sha256_hex

MODEL = "vit_tiny_patch16_224"
TIMM_KWARGS = {"patch_size": 4, "depth": 6, "embed_dim": 96, "num_heads": 3}  # img_size=32: data.image_size
PRETRAIN_CLASSES = range(50, 100)
PROBE_CLASSES = range(0, 50)


def build_model(num_classes: int) -> torch.nn.Module:
    return timm.create_model(MODEL, pretrained=False, img_size=32, num_classes=num_classes, **TIMM_KWARGS)


def class_subset(x: np.ndarray, y: np.ndarray, classes: range) -> Tuple[torch.Tensor, torch.Tensor]:
    """uint8 (N, 32, 32, 3) images and labels of ``classes`` -> uint8 (n, 3, 32, 32), labels - classes.start."""
    keep = (y >= classes.start) & (y < classes.stop)
    return torch.from_numpy(x[keep]).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y[keep] - classes.start)


def normalise(images: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float, scaled to [0, 1] and normalised with the model's timm mean/std."""
    cfg = timm.data.resolve_data_config({}, model=model)
    mean, std = (torch.tensor(cfg[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    return (images.float() / 255.0 - mean) / std


def augment(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 32-px crop of the 4-pixel zero-padded image and a horizontal flip, per image; uint8 (B, 3, 32, 32)."""
    padded = F.pad(images, (4, 4, 4, 4))
    dx, dy = torch.randint(0, 9, (2, len(images)), generator=gen)
    flips = torch.rand(len(images), generator=gen) < 0.5
    out = torch.stack([padded[i, :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32] for i in range(len(images))])
    out[flips] = out[flips].flip(-1)
    return out


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine to 0 at ``total``."""
    if step < warmup:
        return base * (step + 1) / warmup
    return 0.5 * base * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def save_state(out: Path, model, optimizer, epoch: int, gen: torch.Generator) -> None:
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "generator": gen.get_state()}, buffer)
    atomic_write_bytes(out / "state.pt", buffer.getvalue())


def train(args) -> torch.nn.Module:
    """Train (or resume) to ``args.epochs`` epochs; returns the model."""
    torch.manual_seed(args.seed)
    data = np.load(args.shared / "data" / "cifar100.npz")
    images, labels = class_subset(data["train_x"], data["train_y"], PRETRAIN_CLASSES)
    model = build_model(len(PRETRAIN_CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    gen = torch.Generator().manual_seed(args.seed)
    start = 0
    if (args.out / "state.pt").is_file():
        state = torch.load(args.out / "state.pt", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        start = state["epoch"] + 1
    steps = math.ceil(len(labels) / args.batch)
    for epoch in range(start, args.epochs):
        began, total, correct, seen = time.time(), 0.0, 0, 0
        model.train()
        order = torch.randperm(len(labels), generator=gen)
        for i in range(steps):
            idx = order[i * args.batch:(i + 1) * args.batch]
            for group in optimizer.param_groups:
                group["lr"] = lr_at(epoch * steps + i, args.epochs * steps, steps, args.lr)
            logits = model(normalise(augment(images[idx], gen), model))
            loss = F.cross_entropy(logits, labels[idx], label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
            correct += int((logits.argmax(1) == labels[idx]).sum())
            seen += len(idx)
        save_state(args.out, model, optimizer, epoch, gen)
        line = {"epoch": epoch, "loss": total / seen, "train_acc": correct / seen,
                "minutes": (time.time() - began) / 60}
        with open(args.out / "log.jsonl", "a") as log:
            log.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)
    return model


@torch.no_grad()
def features(model, images: torch.Tensor, batch: int = 500) -> torch.Tensor:
    """Frozen class-token features (N, D) of uint8 images (no augmentation)."""
    model.eval()
    return torch.cat([model.forward_head(model.forward_features(normalise(images[i:i + batch], model)),
                                         pre_logits=True) for i in range(0, len(images), batch)])


@torch.no_grad()
def own_accuracy(model, images: torch.Tensor, labels: torch.Tensor, batch: int = 500) -> float:
    model.eval()
    hits = sum(int((model(normalise(images[i:i + batch], model)).argmax(1) == labels[i:i + batch]).sum())
               for i in range(0, len(images), batch))
    return hits / len(labels)


def report(args, model) -> dict:
    """backbone.pt (no head) and report.json: checksum, own test accuracy (50-99), linear probe (0-49)."""
    from sklearn.linear_model import LogisticRegression

    data = np.load(args.shared / "data" / "cifar100.npz")
    own_test = class_subset(data["test_x"], data["test_y"], PRETRAIN_CLASSES)
    probe_train = class_subset(data["train_x"], data["train_y"], PROBE_CLASSES)
    probe_test = class_subset(data["test_x"], data["test_y"], PROBE_CLASSES)
    own = own_accuracy(model, *own_test)
    probe = LogisticRegression(max_iter=2000).fit(features(model, probe_train[0]).numpy(), probe_train[1].numpy())
    probe_acc = float(probe.score(features(model, probe_test[0]).numpy(), probe_test[1].numpy()))
    headless = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    buffer = io.BytesIO()
    torch.save(headless, buffer)
    atomic_write_bytes(args.out / "backbone.pt", buffer.getvalue())
    result = {"model": MODEL, "timm_kwargs": {"img_size": 32, **TIMM_KWARGS}, "epochs": args.epochs,
              "seed": args.seed, "backbone_sha256": sha256_hex(buffer.getvalue()),
              "test_acc_classes_50_99": own, "linear_probe_acc_classes_0_49": probe_acc}
    atomic_write_bytes(args.out / "report.json", (json.dumps(result, indent=2) + "\n").encode())
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", type=Path, default=Path("../shared"), help="folder with data/cifar100.npz")
    p.add_argument("--out", type=Path, default=Path("runs/bench_data/weak_vit"))
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report-only", action="store_true", help="only (re)write backbone.pt and report.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        model = build_model(len(PRETRAIN_CLASSES))
        model.load_state_dict(torch.load(args.out / "state.pt", weights_only=True)["model"])
    else:
        model = train(args)
    print(json.dumps(report(args, model), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
