"""The cross-check's small task: ``python -m crosscheck.harness.small_task --shared ../shared --out FILE.npz``.

CIFAR-100 classes 0-49 from ``../shared/data/cifar100.npz``: the first 20 training and the first 10 test images
of each class in file order, kept in file order (``train_x`` (1000, 32, 32, 3) uint8, ``train_y`` (1000,) int64,
``test_x`` (500, ...), ``test_y``). Both sides of the cross-check read this file (norga as ``data.name: array``,
the references through a small dataset class); docs/crosscheck.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import numpy as np

from bench.small_task import first_per_class, small_task  # noqa: F401  (the rule, re-exported)

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
