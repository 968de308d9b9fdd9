"""Image-folder benchmarks read lazily from disk: Split ImageNet-R and Split CUB-200.

Both return :class:`RawData` whose ``*_x`` are arrays of absolute file paths
(images are decoded only when a sample is loaded). Files are listed and
checked here, at build time, so a missing or truncated download fails before
training with one :class:`DataError`. User files are never moved or rewritten.

ImageNet-R split (it has no official one): per class (sorted folder names),
the sorted file list is permuted with ``RandomState(split_seed + class_index)``
and the first ``round(0.8 n)`` files are train, the rest test. The split's
sha256 (over "train/test<TAB>relative path" lines) is logged in the run's
metrics; ``options.split_file`` (JSON ``{"train": [...], "test": [...]}`` of
paths relative to the ``imagenet-r`` folder) replaces it with another paper's split.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .imagenet_r_splits import SPLITS, coda_prompt_split, folders_split
from .sources import DataError, RawData, register_source

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"}
IMAGENET_R_URL = "https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar"
CUB_URL = "https://data.caltech.edu/records/65de6-vzc19/files/CUB_200_2011.tgz"


def _check_options(dataset: str, options: dict, allowed: Sequence[str]) -> None:
    unknown = set(options) - set(allowed)
    if unknown:
        raise DataError(f"{dataset}: unknown data.options {sorted(unknown)}; allowed: {sorted(allowed)}")


def _download(url: str, root: Path, filename: str) -> None:
    """``data.download: true``: fetch, checksum-verify and extract ``filename`` under ``root`` (norga data prepare)."""
    from .prepare import prepare_url

    for line in prepare_url(url, root):
        print(line)


# ---------------------------------------------------------------- ImageNet-R
def _imagenet_r_folder(root) -> Path:
    """``ROOT/imagenet-r`` (or ROOT itself when it is that folder)."""
    root = Path(root) if root else Path(".")
    return root if root.name == "imagenet-r" else root / "imagenet-r"


def list_class_files(folder: Path) -> Dict[str, List[str]]:
    """Sorted class folders -> sorted relative image paths ('<class>/<file>')."""
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    return {c: sorted(f"{c}/{f.name}" for f in (folder / c).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            for c in classes}


def imagenet_r_split(files: Dict[str, List[str]], split_seed: int, train_fraction: float = 0.8
                     ) -> Tuple[List[str], List[str]]:
    """Deterministic per-class 80/20 split of relative paths (see module docstring)."""
    train, test = [], []
    for index, cls in enumerate(sorted(files)):
        names = sorted(files[cls])
        order = np.random.RandomState(split_seed + index).permutation(len(names))
        cut = int(round(train_fraction * len(names)))
        train += [names[i] for i in sorted(order[:cut])]
        test += [names[i] for i in sorted(order[cut:])]
    return train, test


def split_checksum(train: Sequence[str], test: Sequence[str]) -> str:
    """sha256 hex digest of the split (order-independent within each part)."""
    lines = [f"train\t{p}" for p in sorted(train)] + [f"test\t{p}" for p in sorted(test)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _read_split_file(path: Path, folder: Path) -> Tuple[List[str], List[str]]:
    try:
        split = json.loads(Path(path).read_text())
        train, test = [str(p) for p in split["train"]], [str(p) for p in split["test"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"imagenet_r: cannot read split file {path} ({err}); expected JSON "
                        '{"train": [relative paths], "test": [relative paths]} relative to ' + str(folder)) from err
    missing = [p for p in train + test if not (folder / p).is_file()]
    if missing:
        raise DataError(f"imagenet_r: split file {path} lists {len(missing)} files absent under {folder}, "
                        f"e.g. {missing[:3]}")
    if set(train) & set(test):
        raise DataError(f"imagenet_r: split file {path} puts {len(set(train) & set(test))} files in both parts")
    return train, test


@register_source("imagenet_r")
def imagenet_r_source(root, download: bool, options: dict) -> RawData:
    """ImageNet-R: ``ROOT/imagenet-r/<wnid>/*.jpg`` (200 folders); options: split (seeded | coda_prompt |
    folders, see :mod:`norga.data.imagenet_r_splits`), split_seed, split_file, split_root, num_classes."""
    _check_options("imagenet_r", options, ("split", "split_seed", "split_file", "split_root", "num_classes"))
    split = options.get("split", "seeded")
    if split not in SPLITS:
        raise DataError(f"imagenet_r: data.options.split must be one of {list(SPLITS)}, got {split!r}")
    if options.get("split_file") and split != "seeded" or options.get("split_root") and split != "coda_prompt":
        raise DataError("imagenet_r: data.options.split_file goes with the default split only, and split_root "
                        f"with split: coda_prompt (got split {split!r})")
    folder = _imagenet_r_folder(root)
    if not folder.is_dir() and download:
        _download(IMAGENET_R_URL, folder.parent, "imagenet-r.tar")
    if split == "folders":
        return _named_split(folder, "folders (train/ and test/ class folders)", folders_split(folder, IMAGE_SUFFIXES))
    files = _checked_class_files(folder, int(options.get("num_classes", 200)))
    if split == "coda_prompt":
        return _named_split(folder, "coda_prompt (CODA-Prompt's imagenet-r_{train,test}.yaml)",
                            coda_prompt_split(folder, options.get("split_root")))
    if options.get("split_file"):
        train, test = _read_split_file(Path(options["split_file"]), folder)
        source = f"file {options['split_file']}"
    else:
        seed = int(options.get("split_seed", 0))
        train, test = imagenet_r_split(files, seed)
        source = f"per-class 80/20, sorted files, split_seed {seed}"
    return _named_split(folder, source, (train, test, {c: i for i, c in enumerate(files)}))


def _checked_class_files(folder: Path, expected: int) -> Dict[str, List[str]]:
    """The class folders' files; an error unless there are ``expected`` folders of >= 2 images each."""
    layout = (f"expected {folder}/<wnid>/<image>.jpg with {expected} class folders (the extracted imagenet-r.tar "
              f"from {IMAGENET_R_URL}; data.download=true or 'norga data prepare imagenet_r' fetches it)")
    if not folder.is_dir():
        raise DataError(f"imagenet_r: folder not found: {folder}; {layout}")
    files = list_class_files(folder)
    empty = [c for c, names in files.items() if len(names) < 2]
    if len(files) != expected or empty:
        raise DataError(f"imagenet_r: {folder} has {len(files)} class folders ({len(empty)} with < 2 images: "
                        f"{empty[:5]}); {layout}")
    return files


def _named_split(folder: Path, source: str, split) -> RawData:
    """(train paths, test paths, wnid -> class id) relative to ``folder`` -> RawData (absolute paths)."""
    train, test, index = split
    label = lambda paths: np.array([index[p.split("/")[-2]] for p in paths], dtype=np.int64)
    absolute = lambda paths: np.array([str(folder / p) for p in paths], dtype=object)
    names = sorted(index, key=index.get)
    return RawData(absolute(train), label(train), absolute(test), label(test), names,
                   info={"split": source, "split_sha256": split_checksum(train, test)})


# ---------------------------------------------------------------- CUB-200
def _read_table(path: Path, columns: int) -> List[List[str]]:
    try:
        rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cub200: cannot read {path} ({err}); re-extract CUB_200_2011.tgz") from err
    bad = [i for i, r in enumerate(rows) if len(r) < columns]
    if bad:
        raise DataError(f"cub200: {path} line {bad[0] + 1} has fewer than {columns} fields")
    return rows


@register_source("cub200")
def cub200_source(root, download: bool, options: dict) -> RawData:
    """CUB-200-2011 with its official ``train_test_split.txt`` (5,994 train / 5,794 test images)."""
    _check_options("cub200", options, ())
    root = Path(root) if root else Path(".")
    folder = root if root.name == "CUB_200_2011" else root / "CUB_200_2011"
    if not folder.is_dir() and download:
        _download(CUB_URL, folder.parent, "CUB_200_2011.tgz")
    needed = ["images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt"]
    missing = [n for n in needed if not (folder / n).is_file()]
    if missing:
        raise DataError(f"cub200: {missing} not found in {folder}; expected the extracted CUB_200_2011.tgz "
                        f"({CUB_URL}): {folder}/{{{','.join(needed)}}} and {folder}/images/<class>/<image>.jpg; "
                        "data.download=true fetches it")
    paths = {i: p for i, p in _read_table(folder / "images.txt", 2)}
    labels = {i: c for i, c in _read_table(folder / "image_class_labels.txt", 2)}
    if not all(c.isdigit() and int(c) >= 1 for c in labels.values()):
        raise DataError(f"cub200: {folder / 'image_class_labels.txt'} must hold class ids 1..200; re-extract "
                        "CUB_200_2011.tgz")
    labels = {i: int(c) - 1 for i, c in labels.items()}
    is_train = {i: s == "1" for i, s in _read_table(folder / "train_test_split.txt", 2)}
    names = [" ".join(r[1:]) for r in _read_table(folder / "classes.txt", 2)]
    if set(paths) != set(labels) or set(paths) != set(is_train):
        raise DataError(f"cub200: images.txt, image_class_labels.txt and train_test_split.txt in {folder} "
                        "list different image ids; re-extract CUB_200_2011.tgz")
    absent = [p for p in paths.values() if not (folder / "images" / p).is_file()]
    if absent:
        raise DataError(f"cub200: {len(absent)} images listed in images.txt are missing under {folder / 'images'}, "
                        f"e.g. {absent[:3]}; re-extract CUB_200_2011.tgz")
    ids = sorted(paths, key=int)
    part = lambda train: [i for i in ids if is_train[i] == train]
    xs = lambda sel: np.array([str(folder / "images" / paths[i]) for i in sel], dtype=object)
    ys = lambda sel: np.array([labels[i] for i in sel], dtype=np.int64)
    return RawData(xs(part(True)), ys(part(True)), xs(part(False)), ys(part(False)), names,
                   info={"split": "official train_test_split.txt"})
