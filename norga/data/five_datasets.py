"""5-Datasets: SVHN, MNIST, CIFAR-10, notMNIST, Fashion-MNIST as 5 tasks of 10 classes (reference order).

Task t is dataset t; its labels are offset by 10·t (SVHN 0-9, MNIST 10-19, CIFAR-10 20-29,
notMNIST 30-39, Fashion-MNIST 40-49). Grayscale images become 3-channel at load time
(``ArrayImageDataset``); images keep their native size (28 or 32 px) until the transforms.

Layout under ``ROOT`` (torchvision's layouts; ``data.download: true`` fetches all five)::

    ROOT/SVHN/train_32x32.mat, test_32x32.mat          torchvision SVHN(ROOT/SVHN)
    ROOT/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte   torchvision MNIST(ROOT)
    ROOT/cifar-10-batches-py/                            torchvision CIFAR10(ROOT)
    ROOT/notMNIST/{Train,Test}/{A..J}/*.png              NOTMNIST_URL (the copy the reference code uses)
    ROOT/FashionMNIST/raw/...                            torchvision FashionMNIST(ROOT)
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np

from .folders import IMAGE_SUFFIXES, _download
from .sources import DataError, RawData, register_source

NOTMNIST_URL = "https://github.com/facebookresearch/Adversarial-Continual-Learning/raw/main/data/notMNIST.zip"
ORDER = ("svhn", "mnist", "cifar10", "notmnist", "fashion_mnist")
Split = Tuple[np.ndarray, np.ndarray]  # (images: object array of per-image uint8 arrays or paths, labels int64)


def _objects(images) -> np.ndarray:
    """(N, ...) image array -> object array (N,) of per-image views, so datasets of different sizes concatenate."""
    out = np.empty(len(images), dtype=object)
    out[:] = list(images)
    return out


def _torchvision(cls_name: str, root: Path, download: bool, layout: str, **split_kwargs) -> Callable[[bool], Split]:
    import torchvision.datasets as tvd

    def load(train: bool) -> Split:
        kwargs = {"split": "train" if train else "test"} if cls_name == "SVHN" else {"train": train}
        try:
            ds = getattr(tvd, cls_name)(str(root), download=download, **kwargs)
        except (RuntimeError, OSError) as err:
            raise DataError(f"five_datasets: {cls_name} not found or corrupt under {root} ({err}); expected "
                            f"{layout}; set data.download=true to fetch it with torchvision") from err
        data = np.asarray(ds.data)
        if cls_name == "SVHN":
            data = data.transpose(0, 2, 3, 1)  # (N, 3, 32, 32) -> NHWC
        labels = ds.labels if cls_name == "SVHN" else ds.targets
        return _objects(data), np.asarray(labels, dtype=np.int64)

    return load


def _notmnist(root: Path, download: bool) -> Callable[[bool], Split]:
    folder = root / "notMNIST"
    if not folder.is_dir() and download:
        _download(NOTMNIST_URL, root, "notMNIST.zip")

    def load(train: bool) -> Split:
        part = folder / ("Train" if train else "Test")
        letters = [chr(ord("A") + i) for i in range(10)]
        missing = [c for c in letters if not (part / c).is_dir()]
        if missing:
            raise DataError(f"five_datasets: notMNIST folders {missing} not found in {part}; expected "
                            f"{folder}/{{Train,Test}}/{{A..J}}/*.png (notMNIST.zip from {NOTMNIST_URL}); "
                            "set data.download=true to fetch it")
        paths, labels = [], []
        for label, letter in enumerate(letters):
            files = sorted(f for f in (part / letter).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            paths += [str(f) for f in files]
            labels += [label] * len(files)
        return np.array(paths, dtype=object), np.array(labels, dtype=np.int64)

    return load


def _loaders(root: Path, download: bool) -> Dict[str, Callable[[bool], Split]]:
    return {
        "svhn": _torchvision("SVHN", root / "SVHN", download, f"{root / 'SVHN'}/{{train,test}}_32x32.mat"),
        "mnist": _torchvision("MNIST", root, download, f"{root / 'MNIST' / 'raw'}/ with the 4 idx files"),
        "cifar10": _torchvision("CIFAR10", root, download, f"{root / 'cifar-10-batches-py'}/"),
        "notmnist": _notmnist(root, download),
        "fashion_mnist": _torchvision("FashionMNIST", root, download,
                                      f"{root / 'FashionMNIST' / 'raw'}/ with the 4 idx files"),
    }


@register_source("five_datasets")
def five_datasets_source(root, download: bool, options: dict) -> RawData:
    """All five datasets, labels offset by 10 per dataset, one fixed task per dataset (see module docstring)."""
    if options:
        raise DataError(f"five_datasets: takes no data.options, got {sorted(options)}")
    root = Path(root) if root else Path(".")
    loaders = _loaders(root, download)
    loaded, problems = {}, []
    for name in ORDER:  # report every missing dataset at once, not one per attempt
        try:
            loaded[name] = {split: loaders[name](split == "train") for split in ("train", "test")}
        except DataError as err:
            problems.append(f"({len(problems) + 1}) {str(err).replace('five_datasets: ', '', 1)}")
    if problems:  # one line: the command line prints every error as a single line
        raise DataError(f"five_datasets: {len(problems)} of 5 datasets missing under {root}: " + " ".join(problems))
    parts = {"train": ([], []), "test": ([], [])}
    counts = {}
    for offset, name in enumerate(ORDER):
        for split in ("train", "test"):
            x, y = loaded[name][split]
            if len(y) == 0 or set(np.unique(y).tolist()) != set(range(10)):
                raise DataError(f"five_datasets: {name} {split} split under {root} must hold labels 0-9, "
                                f"got {sorted(set(np.unique(y).tolist()))}")
            parts[split][0].append(x)
            parts[split][1].append(y + 10 * offset)
            counts[f"{name}_{split}"] = int(len(y))
    (trx, try_), (tex, tey) = [(np.concatenate(xs), np.concatenate(ys)) for xs, ys in parts.values()]
    names = [f"{ds}:{c}" for ds in ORDER for c in range(10)]
    groups = [list(range(10 * t, 10 * t + 10)) for t in range(len(ORDER))]
    return RawData(trx, try_, tex, tey, names, task_groups=groups, info={"datasets": list(ORDER), **counts})
