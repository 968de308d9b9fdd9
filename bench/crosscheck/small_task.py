"""The cross-check's small task: ``python -m bench.crosscheck.small_task --shared ../shared --out FILE.npz``.

CIFAR-100 classes 0-49 from ``../shared/data/cifar100.npz``: the first 20 training and the first 10 test images
of each class in file order, kept in file order (``train_x`` (1000, 32, 32, 3) uint8, ``train_y`` (1000,) int64,
``test_x`` (500, ...), ``test_y``). Both sides of the cross-check read this file (norga as ``data.name: array``,
the references through a small dataset class); docs/crosscheck.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict

import numpy as np

CLASSES, PER_CLASS = 50, {"train": 20, "test": 10}


def first_per_class(data: dict, classes: int, per_split: Dict[str, int]) -> dict:
    """The first ``per_split[split]`` images of classes 0..classes-1 in file order (the small task's rule)."""
    out = {}
    for split, n in per_split.items():
        x, y = data[f"{split}_x"], data[f"{split}_y"].astype(np.int64)
        keep = np.sort(np.concatenate([np.flatnonzero(y == c)[:n] for c in range(classes)]))
        out[f"{split}_x"], out[f"{split}_y"] = x[keep], y[keep]
    return out


def small_task(cifar100: dict) -> dict:
    return first_per_class(cifar100, CLASSES, PER_CLASS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared")
    p.add_argument("--out", type=Path, default=Path("runs/crosscheck/cifar50_small.npz"))
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **small_task(np.load(args.shared / "data" / "cifar100.npz")))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
