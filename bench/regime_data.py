"""What a benchmark regime's runs read: the data file (``regime.yaml``'s ``data``) and the backbone weights
(``weights``), built or checked from the command line's ``--shared``, ``--data-dir`` and ``--fashion-dir``."""
from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import List

from bench import mixed_domains
from bench.regimes import Regime
from norga.files import atomic_write_bytes

WEIGHTS_FILE = "weights/dinov2_vits14_imgfocus.safetensors"


def cifar100_root(args) -> Path:
    return args.shared / "data" / "cifar100.npz"


def mixed_root(args) -> Path:
    return mixed_domains.build(args.shared, args.fashion_dir, args.data_dir / "mixed_domains.npz")


def cifar100_first50_root(args) -> Path:
    """CIFAR-100 classes 0-49 only (labels unchanged) as an .npz under --data-dir (written once)."""
    import numpy as np

    out = args.data_dir / "cifar100_first50.npz"
    if not out.is_file():
        data = np.load(cifar100_root(args))
        keep = {split: data[f"{split}_y"] < 50 for split in ("train", "test")}
        buffer = io.BytesIO()
        np.savez(buffer, **{f"{split}_{k}": data[f"{split}_{k}"][keep[split]] for split in keep for k in ("x", "y")})
        atomic_write_bytes(out, buffer.getvalue())  # never a partial file, even with parallel processes
    return out


DATA = {"cifar100": cifar100_root, "mixed_domains": mixed_root,  # regime.yaml's ``data`` -> data.root builder
        "cifar100_first50": cifar100_first50_root}
WEIGHTS = {"dinov2": lambda args: args.shared / WEIGHTS_FILE,  # regime.yaml's ``weights`` -> model.checkpoint
           "weak_vit": lambda args: args.data_dir / "weak_vit" / "backbone.pt"}


def regime_extra(regime: Regime, args) -> List[str]:
    """The overrides every run of ``regime`` gets: the built data file and the backbone weights (``args``: the
    command line's --shared, --data-dir, --fashion-dir); exits naming the script when the weights are missing."""
    check_weights(args.shared)
    weights = WEIGHTS[regime.weights](args)
    if not weights.is_file():
        sys.exit(f"error: {weights} is missing; build it with "
                 f"python -m studies.weak_backbone.build --out {weights.parent}")
    args.data_root = DATA[regime.data](args)
    return [f"data.root={args.data_root}", f"model.checkpoint={weights}"]


def check_weights(shared: Path) -> None:
    """Exit with a clear message when the real backbone weights are missing."""
    if not (shared / WEIGHTS_FILE).is_file():
        sys.exit(f"error: this benchmark needs {shared / WEIGHTS_FILE} (DINOv2 ViT-S/14 in timm's layout, "
                 "safetensors; ../shared/weights/README.md). Elsewhere, export timm's 'vit_small_patch14_dinov2' "
                 "yourself and pass --shared DIR (with data/cifar100.npz and data/mnist.npz).")
    for name in ("cifar100.npz", "mnist.npz"):
        if not (shared / "data" / name).is_file():
            sys.exit(f"error: missing {shared / 'data' / name}: CIFAR-100 / MNIST as .npz with train_x/train_y/"
                     "test_x/test_y (uint8); ../shared/data/README.md; pass --shared DIR")
