"""Readers that verify a prepared file by its content (what ``norga data prepare`` checks when a file's checksum
is not the published one): each returns a short description of what it read, or raises :class:`ContentError`
saying in a few words what is wrong.

Sizes are the published ones (:data:`ROWS`); tests on small fixtures patch that table. Pickles are read with
:class:`ArrayUnpickler`, which builds nothing but dicts, lists, strings and numpy arrays (a CIFAR pickle from
an untrusted archive cannot run code).
"""
from __future__ import annotations

import io
import pickle
import struct
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import numpy as np

# dataset -> part -> number of images in the published files
ROWS: Dict[str, Dict[str, int]] = {
    "cifar100": {"train": 50000, "test": 10000},
    "cifar10": {"data_batch": 10000, "test_batch": 10000},
    "mnist": {"train": 60000, "t10k": 10000},
    "fashion_mnist": {"train": 60000, "t10k": 10000},
    "svhn": {"train": 73257, "test": 26032},
}
IDX_MAGIC = {1: 2049, 3: 2051}  # dimensions -> magic number of an idx file (labels, images)
_ALLOWED = {("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class ContentError(Exception):
    """A file exists but is not what the benchmark needs; the message says what is wrong."""


class ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only."""

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise ContentError(f"holds a Python object {module}.{name}, not plain arrays")
        return super().find_class(module, name)


def load_pickle(path: Path) -> dict:
    """The dict pickled in ``path`` (latin1 strings, as torchvision reads CIFAR); ContentError otherwise."""
    try:
        with open(path, "rb") as f:
            value = ArrayUnpickler(io.BufferedReader(f), encoding="latin1").load()
    except ContentError:
        raise
    except Exception as err:  # noqa: BLE001 - any unpickling failure means "not this file"
        raise ContentError(f"is not a readable pickle ({type(err).__name__})") from err
    if not isinstance(value, dict):
        raise ContentError(f"holds a {type(value).__name__}, not a dict")
    return value


def _expect_rows(found: int, dataset: str, part: str) -> None:
    rows = ROWS.get(dataset, {}).get(part)
    if rows is not None and found != rows:
        raise ContentError(f"holds {found} images where the published {dataset} {part} file holds {rows}")


def _labels(values, rows: int, classes: int, key: str) -> None:
    labels = np.asarray(values)
    if labels.shape != (rows,) or labels.dtype.kind not in "iu":
        raise ContentError(f"'{key}' is not {rows} integer labels (shape {labels.shape}, {labels.dtype})")
    if rows and (labels.min() < 0 or labels.max() >= classes):
        raise ContentError(f"'{key}' holds labels outside 0..{classes - 1} (e.g. {int(labels.max())})")


def cifar_batch(dataset: str, part: str, label_key: str, classes: int) -> Callable[[Path], str]:
    """A CIFAR pickle: 'data' uint8 (N, 3072), N labels under ``label_key`` in 0..classes-1, N as published."""

    def read(path: Path) -> str:
        batch = load_pickle(path)
        missing = [k for k in ("data", label_key) if k not in batch]
        if missing:
            raise ContentError(f"has no {missing} (keys: {sorted(map(str, batch))[:6]})")
        data = batch["data"]
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            shape = getattr(data, "shape", type(data).__name__)
            raise ContentError(f"'data' is not uint8 (N, 3072) images (found {shape})")
        _labels(batch[label_key], len(data), classes, label_key)
        _expect_rows(len(data), dataset, part)
        return f"{len(data)} images"

    return read


def label_names(key: str, classes: int) -> Callable[[Path], str]:
    """A CIFAR meta pickle: ``classes`` names under ``key``."""

    def read(path: Path) -> str:
        names = load_pickle(path).get(key)
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ContentError(f"has no list of names under '{key}'")
        if len(names) != classes:
            raise ContentError(f"lists {len(names)} names under '{key}', expected {classes}")
        return f"{classes} class names"

    return read


def idx_file(dataset: str, part: str, dims: int, classes: int = 10) -> Callable[[Path], str]:
    """An idx file (MNIST format): its magic number, a length matching its header, N as published."""

    def read(path: Path) -> str:
        with open(path, "rb") as f:
            header = f.read(4 + 4 * dims)
            if len(header) < 4 + 4 * dims:
                raise ContentError("is too short for an idx header")
            magic, *shape = struct.unpack(f">I{dims}I", header)
            if magic != IDX_MAGIC[dims]:
                raise ContentError(f"is not an idx{dims} file (magic number {magic}, expected {IDX_MAGIC[dims]})")
            body = f.read() if dims == 1 else None
        size = int(np.prod(shape)) + len(header)
        if path.stat().st_size != size:
            raise ContentError(f"is {path.stat().st_size} bytes, its header {shape} says {size} (truncated?)")
        if body is not None and body and max(body) >= classes:
            raise ContentError(f"holds labels outside 0..{classes - 1} (e.g. {max(body)})")
        _expect_rows(shape[0], dataset, part)
        return f"{shape[0]} {'labels' if dims == 1 else 'images'}"

    return read


def svhn_mat(part: str) -> Callable[[Path], str]:
    """An SVHN .mat: X (32, 32, 3, N) and y (N, 1), N as published (read from its header, not loaded)."""

    def read(path: Path) -> str:
        from scipy.io import whosmat

        try:
            found = {name: shape for name, shape, _ in whosmat(str(path))}
        except Exception as err:  # noqa: BLE001 - scipy raises many kinds for a non-.mat file
            raise ContentError(f"is not a readable MATLAB file ({type(err).__name__})") from err
        x, y = found.get("X"), found.get("y")
        if x is None or y is None or len(x) != 4 or tuple(x[:3]) != (32, 32, 3) or tuple(y) != (x[3], 1):
            raise ContentError(f"has not X (32, 32, 3, N) and y (N, 1) (found {found})")
        _expect_rows(x[3], "svhn", part)
        return f"{x[3]} images"

    return read


def listed_files(listing: Callable[[], Sequence[str]], what: str) -> Callable[[Path], str]:
    """A folder holding every file ``listing()`` names (relative paths), each non-empty."""

    def read(folder: Path) -> str:
        names = listing()
        missing = [n for n in names if not _non_empty(folder / n)]
        if missing:
            raise ContentError(f"lacks {len(missing)} of the {len(names)} files of {what}, e.g. {missing[0]}")
        return f"{len(names)} files"

    return read


def letter_folders(parts: Sequence[str], letters: str, suffix: str) -> Callable[[Path], str]:
    """``<folder>/<part>/<letter>/*<suffix>``: every letter folder of every part holds files."""

    def read(folder: Path) -> str:
        count = 0
        for part in parts:
            for letter in letters:
                files = [p for p in (folder / part / letter).glob(f"*{suffix}")] if (folder / part).is_dir() else []
                if not files:
                    raise ContentError(f"has no {suffix} files in {part}/{letter}/")
                count += len(files)
        return f"{count} images"

    return read


def check_problems(check: Callable[[Path], object]) -> Callable[[Path], str]:
    """A benchmark's ``--check`` (without decoding) finds no problem in the folder."""

    def read(folder: Path) -> str:
        report = check(folder)
        if report.problems:
            raise ContentError(report.problems[0])
        return f"{len(report.files)} images"

    return read


def _non_empty(path: Path) -> Optional[bool]:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False
