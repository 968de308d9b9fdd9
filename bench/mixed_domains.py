"""A mixed-domain task sequence from the real data reachable offline, in the spirit of 5-Datasets.

    python -m bench.mixed_domains --out runs/bench_data/mixed_domains.npz   # normally called by real_data_cpu.py

One fixed task per domain, 10 classes each (``DOMAINS``): MNIST digits, Fashion-MNIST
garments and CIFAR-100 class groups. Grey 28 px images are zero-padded to 32 px
and repeated to RGB, so every image is uint8 (32, 32, 3). The file is an ``array``
benchmark with ``task_groups`` / ``task_names`` (norga.data.sources), so ``class_order:
seed`` shuffles the order of the domains per seed and ``data.train_per_class`` draws a
per-seed subset of the pool written here. The pool itself (``POOL_TRAIN`` / ``POOL_TEST``
images per class) is drawn once with ``POOL_SEED``; a file whose recorded recipe differs
from the current one is rebuilt.

Sources: ``../shared/data/mnist.npz`` and ``cifar100.npz`` (see their README) and
Fashion-MNIST's idx files from Debian's ``dataset-fashion-mnist``
(``/usr/share/datasets/fashion-mnist``; torchvision's raw layout elsewhere).
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from norga.files import atomic_write_bytes

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
POOL_TRAIN, POOL_TEST, POOL_SEED = 200, 50, 0
# task name -> (source, original labels); CIFAR-100 groups are fixed lists of fine labels
DOMAINS: Dict[str, Tuple[str, List[int]]] = {
    "mnist": ("mnist", list(range(10))),
    "fashion_mnist": ("fashion_mnist", list(range(10))),
    "cifar100_a": ("cifar100", list(range(0, 10))),
    "cifar100_b": ("cifar100", list(range(10, 20))),
}
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"]
Split = Tuple[np.ndarray, np.ndarray]


def recipe() -> str:
    """What the file is built from; stored in it, so a changed recipe triggers a rebuild."""
    return json.dumps({"domains": DOMAINS, "pool": [POOL_TRAIN, POOL_TEST, POOL_SEED], "pad": "28->32 zeros",
                       "names": 2})


def _to_rgb32(x: np.ndarray) -> np.ndarray:
    """(N, 28, 28) grey -> (N, 32, 32, 3) by a 2-pixel zero border; RGB 32 px passes through."""
    if x.ndim == 4:
        return x
    return np.repeat(np.pad(x, ((0, 0), (2, 2), (2, 2)))[..., None], 3, axis=3)


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _fashion(folder: Path) -> Dict[str, Split]:
    names = {"train": "train", "test": "t10k"}
    out = {}
    for split, stem in names.items():
        images = folder / f"{stem}-images-idx3-ubyte.gz"
        labels = folder / f"{stem}-labels-idx1-ubyte.gz"
        if not (images.is_file() and labels.is_file()):
            raise SystemExit(f"error: Fashion-MNIST not found: {images} / {labels}; install Debian's "
                             "dataset-fashion-mnist (apt-get install -y dataset-fashion-mnist) or pass "
                             "--fashion-dir with the four idx .gz files")
        out[split] = (_read_idx(images), _read_idx(labels).astype(np.int64))
    out["classes"] = FASHION_CLASSES
    return out


def _npz(path: Path) -> Dict[str, Split]:
    if not path.is_file():
        raise SystemExit(f"error: {path} not found (the project's offline copy of the real data, see its README)")
    with np.load(path) as f:
        out = {s: (f[f"{s}_x"], f[f"{s}_y"].astype(np.int64)) for s in ("train", "test")}
        out["classes"] = [str(c) for c in f["classes"]] if "classes" in f.files else None
    return out


def _pool(split: Split, labels: List[int], per_class: int, rng: np.random.Generator, offset: int) -> Split:
    """``per_class`` images of each label, relabelled offset + position in ``labels``."""
    x, y = split
    short = [c for c in labels if (y == c).sum() < per_class]
    if short:
        raise SystemExit(f"error: labels {short} have fewer than {per_class} images; the mixed-domain pool needs "
                         f"the full datasets (see bench/mixed_domains.py)")
    idx = [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in labels]
    new = np.concatenate([np.full(per_class, offset + k, dtype=np.int64) for k in range(len(labels))])
    return _to_rgb32(x[np.concatenate(idx)]), new


def build(shared: Path, fashion_dir: Path, out: Path) -> Path:
    """Write the mixed-domain .npz to ``out`` (atomically) unless it exists with the same recipe."""
    if out.is_file():
        with np.load(out) as f:
            if "recipe" in f.files and str(f["recipe"]) == recipe():
                return out
    sources = {"mnist": lambda: _npz(shared / "data" / "mnist.npz"),
               "cifar100": lambda: _npz(shared / "data" / "cifar100.npz"),
               "fashion_mnist": lambda: _fashion(fashion_dir)}
    loaded = {source: sources[source]() for source in dict.fromkeys(s for s, _ in DOMAINS.values())}
    rng, parts, names = np.random.default_rng(POOL_SEED), {"train": ([], []), "test": ([], [])}, []
    for t, (name, (source, labels)) in enumerate(DOMAINS.items()):
        data = loaded[source]
        names += [f"{name}:{data['classes'][c] if data['classes'] else c}" for c in labels]
        for split, per_class in (("train", POOL_TRAIN), ("test", POOL_TEST)):
            x, y = _pool(data[split], labels, per_class, rng, 10 * t)
            parts[split][0].append(x)
            parts[split][1].append(y)
    arrays = {f"{s}_{k}": np.concatenate(parts[s][i]) for s in ("train", "test") for i, k in enumerate("xy")}
    groups = np.arange(10 * len(DOMAINS)).reshape(len(DOMAINS), 10)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, task_groups=groups, task_names=np.array(list(DOMAINS)), recipe=np.array(recipe()),
             classes=np.array(names))
    atomic_write_bytes(out, buffer.getvalue())  # a temp file of its own: parallel processes may build it at once
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    p.add_argument("--fashion-dir", type=Path, default=FASHION_DIR)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    print(build(args.shared, args.fashion_dir, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
