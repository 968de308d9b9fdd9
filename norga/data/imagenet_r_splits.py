"""Named ImageNet-R train/test splits (``data.options.split``), so a run can use the split of the paper it
is compared with.

* ``seeded`` (default): our per-class 80/20 split of the sorted files (:func:`folders.imagenet_r_split`).
* ``coda_prompt``: the fixed split of CODA-Prompt (``dataloaders/splits/imagenet-r_{train,test}.yaml``,
  GT-RIPL/CODA-Prompt, MIT licence); mammoth (aimagelab/mammoth, ``datasets/imagenet_r_utils``) ships the
  same two files byte for byte. 24,000 train / 6,000 test images drawn at random over the whole dataset
  (per class between 71 % and 92 % train), and CODA-Prompt's own class ids (``targets``), so
  ``class_order: natural`` gives its unshuffled task order. Read from our converted copy
  (``splits/imagenet_r_coda_prompt.tsv``, plain text) or, with ``data.options.split_root``, from a folder holding the
  two original yaml files, checked against their sha256.
* ``folders``: pre-split ``imagenet-r/train/<wnid>/`` and ``imagenet-r/test/<wnid>/`` folders, as
  LAMDA-PILOT reads them (``torchvision.datasets.ImageFolder``: labels = sorted folder names).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..files import sha256_file
from .sources import DataError

SPLITS = ("seeded", "coda_prompt", "folders")
SHIPPED = Path(__file__).parent / "splits" / "imagenet_r_coda_prompt.tsv"
SHIPPED_SHA256 = "54e62af8f795128e5e6192987bda6688bd2fe32b8aadd516815bf85136b4b1ed"  # of SHIPPED's bytes (sha256sum)
CODA_FILES = {  # sha256 of the files in GT-RIPL/CODA-Prompt (commit 6417d4f) = aimagelab/mammoth (e75a491)
    "train": ("imagenet-r_train.yaml", "6bcaa14ca9359915ac3a44c48ae71388146385686eb15da79a37844421a0b845"),
    "test": ("imagenet-r_test.yaml", "57275ac242d68983a4f39ccb81ec34f48b1bd920b9cd79e6e8040d7c042db02a"),
}
CODA_SPLIT_SHA256 = "3db7a766669a2e38b9894f92bf5efab041d56e18a07687d267f03b80a36ce6e6"  # its data.split_sha256
CODA_PREFIX = "data/imagenet-r/"

Split = Tuple[List[str], List[str], Dict[str, int]]  # (train paths, test paths, wnid -> class id)


def _parse_coda_yaml(text: str, name: str) -> Tuple[List[str], List[int]]:
    """CODA-Prompt's ``data:`` (list of paths) and ``targets:`` (list of ints) -> (paths, targets)."""
    lists: Dict[str, list] = {}
    current = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith("-"):
            current = lists.setdefault(line[:-1].strip(), [])
        elif line.startswith("- ") and current is not None:
            current.append(line[2:].strip())
    paths, targets = lists.get("data", []), lists.get("targets", [])
    if not paths or len(paths) != len(targets) or not all(t.isdigit() for t in targets):
        raise DataError(f"imagenet_r: {name} is not a CODA-Prompt split file (data: and targets: lists of "
                        "equal length)")
    return paths, [int(t) for t in targets]


def coda_from_yaml(texts: Dict[str, str]) -> Split:
    """{"train": yaml text, "test": yaml text} -> split; paths made relative to the ``imagenet-r`` folder."""
    out: Dict[str, List[str]] = {}
    classes: Dict[str, int] = {}
    for part, text in texts.items():
        paths, targets = _parse_coda_yaml(text, CODA_FILES[part][0])
        out[part] = sorted(p[len(CODA_PREFIX):] if p.startswith(CODA_PREFIX) else p for p in paths)
        for path, target in zip(paths, targets):
            wnid = path[len(CODA_PREFIX):].split("/")[0] if path.startswith(CODA_PREFIX) else path.split("/")[0]
            if classes.setdefault(wnid, target) != target:
                raise DataError(f"imagenet_r: {CODA_FILES[part][0]} gives class {wnid} two ids")
    return out["train"], out["test"], classes


def read_coda_root(split_root: Path) -> Split:
    """The split from a user's copy of CODA-Prompt's two yaml files in ``split_root``, sha256-checked."""
    texts = {}
    for part, (name, expected) in CODA_FILES.items():
        path = Path(split_root) / name
        if not path.is_file():
            raise DataError(f"imagenet_r: data.options.split_root {split_root} has no {name}; copy "
                            "dataloaders/splits/imagenet-r_{train,test}.yaml of GT-RIPL/CODA-Prompt there")
        actual = sha256_file(path)
        if actual != expected:
            raise DataError(f"imagenet_r: {path} has sha256 {actual}, expected {expected} (CODA-Prompt's file); "
                            "use an unmodified copy, or data.options.split_file for another split")
        texts[part] = path.read_text(encoding="utf-8")
    return coda_from_yaml(texts)


def write_shipped(split: Split, path: Path = SHIPPED) -> None:
    """Write a split as our plain TSV: ``class<TAB>wnid<TAB>id`` then ``train|test<TAB>relative path``.

    Plain text with ``\\n`` line ends (``.gitattributes`` keeps git from converting them), so the list is
    reviewable in a diff and its bytes, hence its sha256, are the same on every platform.

    A new :data:`SHIPPED` needs its sha256 in :data:`SHIPPED_SHA256`, else :func:`read_shipped` refuses it.
    """
    train, test, classes = split
    lines = ["# ImageNet-R split of CODA-Prompt (GT-RIPL/CODA-Prompt, dataloaders/splits/imagenet-r_*.yaml),",
             "# converted by norga.data.imagenet_r_splits. Copyright (c) 2023 GT-RIPL, MIT licence (see NOTICE)."]
    lines += [f"class\t{w}\t{c}" for w, c in sorted(classes.items(), key=lambda item: item[1])]
    lines += [f"train\t{p}" for p in train] + [f"test\t{p}" for p in test]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode())  # guarded: a maintainer's tool writing the package's file


_RESTORE = ("reinstall norga (pip install --force-reinstall norga) or restore the file (git checkout -- "
            "norga/data/splits/imagenet_r_coda_prompt.tsv), or read CODA-Prompt's yaml files with "
            "data.options.split_root")


def _read_checked(path: Path) -> bytes:
    """The bytes of the shipped split list, refused unless their sha256 is :data:`SHIPPED_SHA256`."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"imagenet_r: cannot read norga's split list {path} ({err.strerror}); {_RESTORE}") from err
    actual = hashlib.sha256(data).hexdigest()
    if actual != SHIPPED_SHA256:
        raise DataError(f"imagenet_r: split list {path} has sha256 {actual}, expected {SHIPPED_SHA256} (damaged or "
                        f"modified); {_RESTORE}")
    return data


def read_shipped(path: Optional[Path] = None) -> Split:
    """Our converted copy of CODA-Prompt's split (default :data:`SHIPPED`), refused unless its sha256 matches."""
    data = _read_checked(Path(path or SHIPPED))
    train, test, classes = [], [], {}
    for line in data.decode().splitlines():
        fields = line.split("\t")
        if fields[0] == "class":
            classes[fields[1]] = int(fields[2])
        elif fields[0] in ("train", "test"):
            (train if fields[0] == "train" else test).append(fields[1])
    return train, test, classes


def coda_prompt_split(folder: Path, split_root=None) -> Split:
    """CODA-Prompt's split, every listed file checked to exist under ``folder`` (the ``imagenet-r`` folder)."""
    train, test, classes = read_coda_root(Path(split_root)) if split_root else read_shipped()
    missing = [p for p in train + test if not (folder / p).is_file()]
    if missing:
        raise DataError(f"imagenet_r: split coda_prompt lists {len(missing)} files absent under {folder}, e.g. "
                        f"{missing[:3]}; it needs the complete imagenet-r.tar (30,000 images)")
    return train, test, classes


def folders_split(folder: Path, image_suffixes) -> Split:
    """PILOT-style ``folder/train/<wnid>/*`` and ``folder/test/<wnid>/*``; ids = sorted wnid index."""
    parts = {}
    for part in ("train", "test"):
        base = folder / part
        if not base.is_dir():
            raise DataError(f"imagenet_r: split folders needs {base}/<wnid>/<image> (pre-split folders, as in "
                            "LAMDA-PILOT); not found")
        parts[part] = {c.name: sorted(f"{part}/{c.name}/{f.name}" for f in c.iterdir()
                                      if f.suffix.lower() in image_suffixes)
                       for c in sorted(base.iterdir()) if c.is_dir()}
    if set(parts["train"]) != set(parts["test"]):
        odd = sorted(set(parts["train"]) ^ set(parts["test"]))
        raise DataError(f"imagenet_r: {folder}/train and {folder}/test hold different class folders, e.g. {odd[:3]}")
    empty = [f"{p}/{c}" for p, files in parts.items() for c, names in files.items() if not names]
    if empty:
        raise DataError(f"imagenet_r: split folders: no images in {empty[:3]}")
    classes = {c: i for i, c in enumerate(sorted(parts["train"]))}
    flat = lambda p: [name for c in sorted(parts[p]) for name in parts[p][c]]
    return flat("train"), flat("test"), classes
