"""Raw data sources: each returns uint8 image arrays and integer labels for train and test.

A source is a function ``(root, download, options) -> RawData`` registered in
:data:`SOURCES`; :mod:`norga.data.benchmark` turns it into class-incremental tasks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from ..errors import NorgaError
from ..registry import registrar


class DataError(NorgaError, FileNotFoundError):
    """Data missing or malformed: the message names the dataset, path, expected layout and source."""


@dataclass
class RawData:
    """Images and labels of a dataset.

    ``*_x``: uint8 arrays (N, H, W, 3) or (N, H, W), or object arrays (N,) whose
    items are image file paths (decoded lazily) or per-image uint8 arrays.
    ``task_groups``: original labels per task when the benchmark fixes its tasks
    (5-Datasets: one dataset per task); ``info``: extra facts for metrics.json.
    """

    train_x: np.ndarray
    train_y: np.ndarray  # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray
    class_names: Optional[List[str]] = None
    task_groups: Optional[List[List[int]]] = None
    info: Dict[str, object] = field(default_factory=dict)


SOURCES: Dict[str, Callable[..., RawData]] = {}


register_source = registrar(SOURCES, "data source")  # decorator: @register_source("name")


ARRAY_LAYOUT = "a .npz file with arrays train_x, train_y, test_x, test_y (uint8 images NHWC or NHW, integer labels)"
FIXED_TASKS_LAYOUT = ("optional task_groups: int (T, k), row t = the original labels of fixed task t, every class in "
                      "exactly one row; optional task_names: str (T,), e.g. the source dataset of each task")


@register_source("array")
def array_source(root, download: bool, options: dict) -> RawData:
    """Any .npz with train_x, train_y, test_x, test_y (uint8 NHWC or NHW) and optional classes.

    An optional ``task_groups`` array (T, k) fixes the tasks, like 5-Datasets: task t
    holds exactly the classes of row t (``class_order: seed`` then shuffles the order
    of the tasks), and an optional ``task_names`` (T,) names them (metrics.json, the
    ``per_dataset`` transforms). Everything is checked here (so ``--dry-run`` catches it): a readable npz, uint8
    images with 1, 3 or 4 channels last (channel-first arrays are named as such),
    1-D integer labels >= 0, one label per image, no empty split, and every class
    present in both splits.
    """
    path = Path(root) if root else None
    if path is not None and path.is_dir():
        raise DataError(f"array dataset: data.root {path} is a folder; it must be the .npz file itself "
                        f"({ARRAY_LAYOUT})")
    if path is None or not path.is_file():
        raise DataError(f"array dataset: file not found: {path}; expected {ARRAY_LAYOUT} (data.root = its path)")
    data = _read_npz(path)
    for split in ("train", "test"):
        x = _check_images(path, split, getattr(data, f"{split}_x"))
        setattr(data, f"{split}_x", x)
        setattr(data, f"{split}_y", _check_labels(path, split, getattr(data, f"{split}_y"), len(x)))
    _check_class_coverage(path, data.train_y, data.test_y)
    _check_class_names(path, data)
    _check_task_groups(path, data)
    return data


def _read_npz(path: Path) -> RawData:
    """All arrays of the .npz, read now (a truncated or foreign file fails here, with one DataError)."""
    with open(path, "rb") as raw:
        magic = raw.read(6)
    if not magic.startswith((b"PK", b"\x93NUMPY")):
        raise DataError(f"array dataset {path}: not an .npz archive (it does not start with the zip signature); "
                        f"expected {ARRAY_LAYOUT} (write it with numpy.savez)")
    try:
        f = np.load(path, allow_pickle=False)
        if not hasattr(f, "files"):
            raise DataError(f"array dataset {path}: holds a single array, not an .npz archive; "
                            f"expected {ARRAY_LAYOUT}")
        with f:
            missing = [k for k in ("train_x", "train_y", "test_x", "test_y") if k not in f.files]
            if missing:
                raise DataError(f"array dataset {path}: missing arrays {missing}; expected {ARRAY_LAYOUT}")
            arrays = {k: f[k] for k in ("train_x", "train_y", "test_x", "test_y")}
            classes = [str(c) for c in f["classes"]] if "classes" in f.files else None
            groups = f["task_groups"] if "task_groups" in f.files else None
            task_names = [str(n) for n in f["task_names"]] if "task_names" in f.files else None
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - BadZipFile, zlib/CRC errors, pickle refusals, EOF: all "unreadable"
        if "pickle" in str(err):
            raise DataError(f"array dataset {path}: an array holds Python objects (dtype=object), which are not "
                            "loaded for safety; store plain numeric arrays") from err
        reason = f"{type(err).__name__}: {err}"
        raise DataError(f"array dataset {path}: not a readable .npz archive ({reason}); the file may be truncated "
                        f"or not an npz; expected {ARRAY_LAYOUT} (write it with numpy.savez)") from err
    info = {"datasets": task_names} if task_names is not None else {}
    return RawData(arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"], classes,
                   task_groups=None if groups is None else groups, info=info)


def _check_images(path: Path, split: str, x: np.ndarray) -> np.ndarray:
    """uint8 (N, H, W) or (N, H, W, C) with C in 1, 3, 4; a trailing single channel is dropped."""
    where = f"array dataset {path}: {split}_x"
    if x.dtype != np.uint8:
        raise DataError(f"{where} must be uint8 (0-255), got {x.dtype}; convert with (x * 255).astype(np.uint8) "
                        "if it holds floats in [0, 1]")
    if x.ndim not in (3, 4) or len(x) == 0 or 0 in x.shape:
        raise DataError(f"{where} must be a non-empty NHWC or NHW image array, got shape {x.shape}")
    if x.ndim == 4 and x.shape[-1] not in (1, 3, 4):
        if x.shape[1] in (1, 3, 4):
            raise DataError(f"{where} has shape {x.shape}, which looks channel-first (N, C, H, W); store images "
                            "channel-last (N, H, W, C): x.transpose(0, 2, 3, 1)")
        raise DataError(f"{where} has shape {x.shape}: images need 1 (gray), 3 (RGB) or 4 (RGBA) channels last")
    return x[..., 0] if x.ndim == 4 and x.shape[-1] == 1 else x


def _check_labels(path: Path, split: str, y: np.ndarray, n_images: int) -> np.ndarray:
    """1-D integer labels >= 0, one per image -> int64."""
    where = f"array dataset {path}: {split}_y"
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != n_images:
        raise DataError(f"{where} must be 1-D with one label per image ({n_images}), got shape {y.shape}")
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    if y.dtype.kind not in "iu":
        raise DataError(f"{where} must hold integer class ids, got {y.dtype}")
    if y.min() < 0:
        raise DataError(f"{where} holds negative labels (e.g. {int(y.min())}); class ids must be 0..C-1")
    return y.astype(np.int64)


def _check_class_coverage(path: Path, train_y: np.ndarray, test_y: np.ndarray) -> None:
    """Every class id 0..C-1 has training and test images (else a task's accuracy silently covers fewer)."""
    classes = set(range(int(max(train_y.max(), test_y.max())) + 1))
    for split, y in (("training", train_y), ("test", test_y)):
        absent = sorted(classes - set(np.unique(y).tolist()))
        if absent:
            raise DataError(f"array dataset {path}: classes {absent[:10]} have no {split} images (labels must "
                            f"cover 0..{len(classes) - 1} in both splits)")


def _check_class_names(path: Path, data: RawData) -> None:
    """An optional ``classes`` array names every class id the labels use."""
    largest = int(max(data.train_y.max(), data.test_y.max()))
    if data.class_names is not None and len(data.class_names) <= largest:
        raise DataError(f"array dataset {path}: classes lists {len(data.class_names)} class names but the largest "
                        f"label is {largest}; give one name per class 0..{largest} (or leave classes out)")


def _check_task_groups(path: Path, data: RawData) -> None:
    """``task_groups`` (T, k) integers covering every class exactly once -> lists; ``task_names`` one per row."""
    groups, names = data.task_groups, data.info.get("datasets")
    if groups is None:
        if names is not None:
            raise DataError(f"array dataset {path}: task_names without task_groups; {FIXED_TASKS_LAYOUT}")
        return
    groups = np.asarray(groups)
    num_classes = int(max(data.train_y.max(), data.test_y.max())) + 1
    if groups.ndim != 2 or groups.dtype.kind not in "iu" or groups.size == 0:
        raise DataError(f"array dataset {path}: task_groups has shape {groups.shape} and dtype {groups.dtype}; "
                        f"{FIXED_TASKS_LAYOUT}")
    if sorted(groups.ravel().tolist()) != list(range(num_classes)):
        raise DataError(f"array dataset {path}: task_groups must list each class 0..{num_classes - 1} exactly "
                        f"once; {FIXED_TASKS_LAYOUT}")
    if names is not None and len(names) != len(groups):
        raise DataError(f"array dataset {path}: {len(names)} task_names for {len(groups)} task_groups rows; "
                        f"{FIXED_TASKS_LAYOUT}")
    data.task_groups = [[int(c) for c in row] for row in groups]


@register_source("cifar100")
def cifar100_source(root, download: bool, options: dict) -> RawData:
    """CIFAR-100 via torchvision (python pickle layout ``ROOT/cifar-100-python/``)."""
    from torchvision.datasets import CIFAR100

    try:
        train = CIFAR100(str(root), train=True, download=download)
        test = CIFAR100(str(root), train=False, download=download)
    except RuntimeError as err:
        raise DataError(
            f"cifar100: not found or corrupt under {root} ({err}); expected {Path(str(root)) / 'cifar-100-python'}"
            "/{train,test,meta} (torchvision layout); set data.download=true to fetch it from "
            "https://www.cs.toronto.edu/~kriz/cifar.html, or use the 'array' benchmark with a .npz copy"
        ) from err
    return RawData(train.data, np.asarray(train.targets, dtype=np.int64), test.data,
                   np.asarray(test.targets, dtype=np.int64), list(train.classes))


@register_source("synthetic")
def synthetic_source(root, download: bool, options: dict) -> RawData:
    """Seeded procedural images: each class a colour + an oriented low-frequency stripe pattern.

    options: num_classes (30), train_per_class (40), test_per_class (20), size (32),
    noise (0.08), seed (0). Classes are separable even by a random frozen ViT.
    """
    allowed = {"num_classes", "train_per_class", "test_per_class", "size", "noise", "seed"}
    unknown = set(options) - allowed
    if unknown:
        raise DataError(f"synthetic dataset: unknown options {sorted(unknown)}; allowed: {sorted(allowed)}")
    C, size = int(options.get("num_classes", 30)), int(options.get("size", 32))
    counts = {k: int(options.get(k, d)) for k, d in (("num_classes", 30), ("train_per_class", 40),
                                                     ("test_per_class", 20), ("size", 32))}
    small = [f"{k}={v}" for k, v in counts.items() if v < (8 if k == "size" else 1)]
    if small:
        raise DataError(f"synthetic dataset: data.options {small} too small; num_classes, train_per_class and "
                        "test_per_class must be >= 1, size >= 8")
    rng = np.random.default_rng(int(options.get("seed", 0)))
    colours = rng.uniform(0.15, 0.85, (C, 3))
    angles = rng.uniform(0, np.pi, C)
    freqs = rng.uniform(1.0, 4.0, C)
    yy, xx = np.mgrid[0:size, 0:size] / size

    def make(n_per_class: int):
        xs, ys = [], []
        for c in range(C):
            phase = rng.uniform(0, 2 * np.pi, (n_per_class, 1, 1))
            wave = np.sin(2 * np.pi * freqs[c] * (np.cos(angles[c]) * xx + np.sin(angles[c]) * yy) + phase)
            img = colours[c] + 0.25 * wave[..., None] + rng.normal(0, options.get("noise", 0.08),
                                                                   (n_per_class, size, size, 3))
            xs.append((np.clip(img, 0, 1) * 255).astype(np.uint8))
            ys.append(np.full(n_per_class, c, dtype=np.int64))
        return np.concatenate(xs), np.concatenate(ys)

    train_x, train_y = make(int(options.get("train_per_class", 40)))
    test_x, test_y = make(int(options.get("test_per_class", 20)))
    return RawData(train_x, train_y, test_x, test_y, [f"class_{c}" for c in range(C)])
