"""``norga data prepare <benchmark> --check``: validate a prepared folder without modifying anything.

Each benchmark's check returns a :class:`CheckReport`: images per class and per part (train/test, or
per dataset for 5-Datasets), the problems found (missing or unexpected classes, missing images, layout
errors) and the image files, which :func:`check_benchmark` then decodes (every file, in threads).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .sources import DataError

MAX_LISTED = 10  # problems (and unreadable files) printed one per line; more are counted


@dataclass
class CheckReport:
    """``counts``: part -> class -> number of images; ``problems``: one line each; ``files``: image paths."""

    counts: Dict[str, Dict[str, int]] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)
    files: List[str] = field(default_factory=list)


def _count(labels: np.ndarray, names: Sequence[str]) -> Dict[str, int]:
    found = collections.Counter(int(y) for y in labels)
    return {names[c]: found.get(c, 0) for c in range(len(names))}


def _absent_classes(report: CheckReport, part: str, expected: Sequence[str]) -> None:
    counts = report.counts.get(part, {})
    absent = [c for c in expected if not counts.get(c)]
    if absent:
        report.problems.append(f"{part}: {len(absent)} of {len(expected)} classes have no images: {absent[:5]}")


def check_cifar100(root: Path) -> CheckReport:
    """The torchvision pickles load; 100 classes in both splits."""
    from .sources import cifar100_source

    report = CheckReport()
    try:
        raw = cifar100_source(root, False, {})
    except DataError as err:
        report.problems.append(str(err))
        return report
    for part, y in (("train", raw.train_y), ("test", raw.test_y)):
        report.counts[part] = _count(y, raw.class_names)
        _absent_classes(report, part, raw.class_names)
    return report


def check_imagenet_r(root: Path) -> CheckReport:
    """Every class folder and file of ImageNet-R (the 30,000 files CODA-Prompt's split lists) is present."""
    from .folders import _imagenet_r_folder, list_class_files
    from .imagenet_r_splits import read_shipped

    report, folder = CheckReport(), _imagenet_r_folder(root)
    train, test, _ = read_shipped()
    expected: Dict[str, set] = collections.defaultdict(set)
    for path in train + test:
        expected[path.split("/")[0]].add(path)
    if not folder.is_dir():
        report.problems.append(f"imagenet_r: folder not found: {folder}")
        return report
    present = list_class_files(folder)
    report.counts["images"] = {c: len(files) for c, files in present.items()}
    report.files = [str(folder / p) for files in present.values() for p in files]
    _absent_classes(report, "images", sorted(expected))
    extra = sorted(set(present) - set(expected))
    if extra:
        report.problems.append(f"images: {len(extra)} folders that are not ImageNet-R classes: {extra[:5]}")
    short = {c: sorted(expected[c] - set(present[c])) for c in expected if present.get(c)}
    short = {c: missing for c, missing in short.items() if missing}
    if short:
        n = sum(len(m) for m in short.values())
        report.problems.append(f"images: {n} images missing in {len(short)} classes, "
                               f"e.g. {next(iter(short.values()))[:3]}")
    return report


def check_cub200(root: Path) -> CheckReport:
    """The four index files parse; every image of images.txt exists, counted per class and split."""
    from .folders import _read_table

    report = CheckReport()
    folder = root if root.name == "CUB_200_2011" else root / "CUB_200_2011"
    try:
        paths = dict(_read_table(folder / "images.txt", 2))
        is_train = {i: s == "1" for i, s in _read_table(folder / "train_test_split.txt", 2)}
        classes = [" ".join(r[1:]) for r in _read_table(folder / "classes.txt", 2)]
    except DataError as err:
        report.problems.append(str(err))
        return report
    missing = collections.Counter()
    for part in ("train", "test"):
        report.counts[part] = collections.Counter()
        for i, rel in paths.items():
            if is_train.get(i, False) == (part == "train"):
                present = (folder / "images" / rel).is_file()
                report.counts[part][rel.split("/")[0]] += int(present)
                if present:
                    report.files.append(str(folder / "images" / rel))
                else:
                    missing[rel.split("/")[0]] += 1
        report.counts[part] = {c: report.counts[part][c] for c in classes}
        _absent_classes(report, part, classes)
    if missing:
        report.problems.append(f"{sum(missing.values())} images listed in images.txt are missing, in classes "
                               f"{sorted(missing)[:5]}")
    return report


def check_five_datasets(root: Path) -> CheckReport:
    """Each of the five datasets loads with labels 0-9 in both splits."""
    from .five_datasets import ORDER, _loaders

    report = CheckReport()
    loaders = _loaders(root, False)
    for name in ORDER:
        for part in ("train", "test"):
            try:
                x, y = loaders[name](part == "train")
            except DataError as err:
                report.problems.append(str(err))
                break
            report.counts[f"{name} {part}"] = _count(y, [str(c) for c in range(10)])
            _absent_classes(report, f"{name} {part}", [str(c) for c in range(10)])
            report.files += [item for item in x if isinstance(item, str)]
    return report


def summary(report: CheckReport, per_class: bool = False) -> List[str]:
    """One line per part (classes, images, min-max per class); with ``per_class`` every class's count."""
    lines = []
    for part, counts in report.counts.items():
        values = list(counts.values()) or [0]
        lines.append(f"{part}: {len(counts)} classes, {sum(values)} images, {min(values)}-{max(values)} per class")
        if per_class:
            lines += [f"  {c}: {n}" for c, n in counts.items()]
    return lines


def check_benchmark(benchmark: str, root, decode: bool = True, per_class: bool = False,
                    progress: bool = True) -> Tuple[List[str], List[str]]:
    """(report lines, problems) for ``benchmark`` under ``root``; images decoded unless ``decode`` is False."""
    from .prepare import get_preparer
    from .readability import unreadable_images

    report = get_preparer(benchmark).check(Path(root))
    problems = list(report.problems)
    lines = summary(report, per_class)
    if decode and report.files:
        checked, bad = unreadable_images(report.files, progress=progress)
        lines.append(f"decoded {checked} image files: {len(bad)} unreadable")
        problems += [f"unreadable image {path} ({why})" for path, why in bad]
    return lines, problems
