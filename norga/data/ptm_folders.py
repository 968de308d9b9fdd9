"""The PTM papers' pre-split folder benchmarks: ImageNet-A, ObjectNet, OmniBenchmark and VTAB.

APER/SimpleCIL (Zhou et al., "Revisiting CIL with pre-trained models", IJCV 2024), RanPAC and LAMDA-PILOT
distribute these four as ImageFolder trees ``<folder>/train/<class>/<image>`` and ``<folder>/test/<class>/...``
(LAMDA-CL/LAMDA-PILOT ``utils/data.py`` at 5ecab2d: classes ``iImageNetA``, ``objectnet``, ``omnibenchmark``,
``vtab`` read ``./data/imagenet-a/{train,test}/``, ``./data/objectnet/...``, ``./data/omnibenchmark/...``,
``./data/vtab-cil/vtab/...`` with ``datasets.ImageFolder``; class_order ``np.arange(200)``, ``(200)``,
``(300)``, ``(50)``). Class ids are the sorted class-folder index, as ``ImageFolder`` gives them.

Nobody publishes a checksum of these archives (they are the authors' own re-splits, served from cloud drives,
and are not downloadable without a browser): ``norga data prepare NAME --mirror F`` takes the user's copy from
``F``, records its sha256 (``--sha256 NAME.zip=HEX`` checks it against a trusted value) and extracts it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from .check import CheckReport
from .folders import IMAGE_SUFFIXES, _check_options, split_checksum
from .prepare import Archive, Preparer, register_preparer
from .sources import DataError, RawData, register_source

PAPERS = "the APER/RevisitingCIL or LAMDA-PILOT README (zhoudw-zdw/RevisitingCIL, LAMDA-CL/LAMDA-PILOT)"


@dataclass(frozen=True)
class FolderBenchmark:
    """``folder``: path under ROOT holding ``train/`` and ``test/``; ``archive``: the file the user supplies."""

    name: str
    folder: str
    classes: int
    archive: str
    title: str


PTM_FOLDER_BENCHMARKS = (
    FolderBenchmark("imagenet_a", "imagenet-a", 200, "imagenet-a.zip", "ImageNet-A"),
    FolderBenchmark("objectnet", "objectnet", 200, "objectnet.zip", "ObjectNet"),
    FolderBenchmark("omnibenchmark", "omnibenchmark", 300, "omnibenchmark.zip", "OmniBenchmark"),
    FolderBenchmark("vtab", "vtab-cil/vtab", 50, "vtab-cil.zip", "VTAB (the 50-class CIL subset)"),
)


def _layout(spec: FolderBenchmark, root) -> str:
    return (f"{root}/{spec.folder}/train/<class>/<image> and {root}/{spec.folder}/test/<class>/<image> "
            f"({spec.classes} class folders in each, the same names)")


def _fix(spec: FolderBenchmark, root) -> str:
    return (f"download {spec.archive} by the link in {PAPERS} into a folder F, then run: norga data prepare "
            f"{spec.name} --root {root} --mirror F  (--offline prints the steps)")


def list_split_folders(spec: FolderBenchmark, folder: Path) -> Dict[str, Dict[str, List[str]]]:
    """part ('train'/'test') -> class folder -> sorted relative image paths ('<part>/<class>/<file>')."""
    parts = {}
    for part in ("train", "test"):
        base = folder / part
        if not base.is_dir():
            raise DataError(f"{spec.name}: {base} not found; expected {_layout(spec, folder.parent)}; "
                            f"{_fix(spec, folder.parent)}")
        parts[part] = {c.name: sorted(f"{part}/{c.name}/{f.name}" for f in c.iterdir()
                                      if f.suffix.lower() in IMAGE_SUFFIXES)
                       for c in sorted(base.iterdir()) if c.is_dir()}
    return parts


def _problems(spec: FolderBenchmark, parts: Dict[str, Dict[str, List[str]]], expected: int) -> List[str]:
    """One line per layout problem: class-count mismatch, train/test class sets differ, empty classes."""
    found = []
    for part, files in parts.items():
        if len(files) != expected:
            found.append(f"{spec.name}: {part}/ has {len(files)} class folders, expected {expected}")
    odd = sorted(set(parts["train"]) ^ set(parts["test"]))
    if odd:
        found.append(f"{spec.name}: train/ and test/ hold different class folders, e.g. {odd[:3]}")
    empty = [f"{p}/{c}" for p, files in parts.items() for c, names in files.items() if not names]
    if empty:
        found.append(f"{spec.name}: {len(empty)} class folders without images, e.g. {empty[:3]}")
    return found


def _split(parts: Dict[str, Dict[str, List[str]]]) -> Tuple[List[str], List[str], Dict[str, int]]:
    classes = {c: i for i, c in enumerate(sorted(parts["train"]))}
    flat = lambda p: [name for c in sorted(parts[p]) for name in parts[p][c]]
    return flat("train"), flat("test"), classes


def make_source(spec: FolderBenchmark):
    """The data source of ``spec``: (root, download, options) -> RawData of absolute image paths."""

    def source(root, download: bool, options: dict) -> RawData:
        _check_options(spec.name, options, ("num_classes",))
        root = Path(root) if root else Path(".")
        if download:
            raise DataError(f"{spec.name}: data.download cannot fetch {spec.archive} (no public direct link); "
                            f"set data.download=false and {_fix(spec, root)}")
        folder = root / spec.folder
        parts = list_split_folders(spec, folder)
        problems = _problems(spec, parts, int(options.get("num_classes", spec.classes)))
        if problems:
            raise DataError(f"{problems[0]} under {folder}; expected {_layout(spec, root)}")
        train, test, index = _split(parts)
        label = lambda paths: np.array([index[p.split("/")[1]] for p in paths], dtype=np.int64)
        absolute = lambda paths: np.array([str(folder / p) for p in paths], dtype=object)
        return RawData(absolute(train), label(train), absolute(test), label(test), sorted(index, key=index.get),
                       info={"split": "pre-split train/ and test/ folders (APER / LAMDA-PILOT)",
                             "split_sha256": split_checksum(train, test)})

    source.__doc__ = f"{spec.title}: {spec.classes} classes, pre-split ImageFolder trees under ROOT/{spec.folder}."
    return source


def make_check(spec: FolderBenchmark):
    """``norga data prepare NAME --check``: images per class and part, layout problems, the files to decode."""

    def check(root: Path) -> CheckReport:
        report, folder = CheckReport(), Path(root) / spec.folder
        try:
            parts = list_split_folders(spec, folder)
        except DataError as err:
            report.problems.append(str(err))
            return report
        report.counts = {p: {c: len(names) for c, names in files.items()} for p, files in parts.items()}
        report.problems += _problems(spec, parts, spec.classes)
        report.files = [str(folder / n) for files in parts.values() for names in files.values() for n in names]
        return report

    return check


def _archive(spec: FolderBenchmark) -> Archive:
    top = spec.folder.split("/")[0]
    return Archive(spec.archive, (), None, f"the authors' archive linked from {PAPERS}",
                   ((top, top),))


for _spec in PTM_FOLDER_BENCHMARKS:
    register_source(_spec.name)(make_source(_spec))
    register_preparer(_spec.name)(Preparer(_spec.name, (_archive(_spec),), _layout(_spec, "{root}"),
                                           make_check(_spec)))
