"""Data sources derived from another registered source, for tuning without the evaluation data (docs/tuning.md).

* ``class_subset``: only some classes of a source, relabelled 0..k-1 in ascending order of their original ids.
  ``data: {name: class_subset, root: ROOT, options: {source: cifar100, classes: "50-99", options: {...}}}``
  is CIFAR-100's classes 50..99 as a 50-class benchmark (``classes``: a list of ids, or ``"a-b"`` inclusive);
* ``validation_carve``: a validation split carved from the source's *training* images — per class a seeded
  ``fraction`` of them (at least one, at least one left) becomes the "test" split, the rest the training split;
  the source's own test images are never put in a dataset, so never decoded, transformed or evaluated.
  ``data: {name: validation_carve, options: {source: NAME, options: {...}, fraction: 0.2, seed: 0}}``.

Both pass ``root`` and ``download`` to the source they wrap and nest (a carve of a class subset is allowed).
``info`` names what was derived, so metrics.json says it.
"""
from __future__ import annotations

from typing import List, Sequence, Union

import numpy as np

from .sources import SOURCES, DataError, RawData, register_source


def _inner(name: str, root, download: bool, options: dict, allowed: Sequence[str]) -> RawData:
    """The RawData of the source a derived source wraps (``options.source``, with ``options.options``)."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise DataError(f"{name}: unknown data.options {unknown}; allowed: {sorted(allowed)}")
    source = options.get("source")
    if source not in SOURCES:
        raise DataError(f"{name}: data.options.source must name a registered data source ({sorted(SOURCES)}), "
                        f"got {source!r}")
    inner = options.get("options") or {}
    if not isinstance(inner, dict):
        raise DataError(f"{name}: data.options.options must be a mapping (the options of {source})")
    raw = SOURCES[source](root, download, dict(inner))
    if raw.task_groups:
        raise DataError(f"{name}: {source} fixes its tasks (task_groups); derive from a split benchmark instead")
    return raw


def parse_classes(spec: Union[str, Sequence[int]], where: str = "class_subset") -> List[int]:
    """Class ids from a list or an inclusive range ``"a-b"`` -> sorted unique ints; DataError when empty or bad."""
    if isinstance(spec, str):
        parts = spec.split("-")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or int(parts[0]) > int(parts[1]):
            raise DataError(f"{where}: data.options.classes {spec!r} must be a list of class ids or 'a-b' (a <= b)")
        return list(range(int(parts[0]), int(parts[1]) + 1))
    if not isinstance(spec, (list, tuple)) or not spec or not all(isinstance(c, int) and c >= 0 for c in spec):
        raise DataError(f"{where}: data.options.classes must be a non-empty list of class ids >= 0 or 'a-b', "
                        f"got {spec!r}")
    if len(set(spec)) != len(spec):
        raise DataError(f"{where}: data.options.classes lists a class twice: {spec!r}")
    return sorted(int(c) for c in spec)


@register_source("class_subset")
def class_subset_source(root, download: bool, options: dict) -> RawData:
    """Some classes of another source, relabelled 0..k-1 (ascending original id): a sequence disjoint from
    another subset of the same data set. options: source, options (the source's), classes (list or "a-b")."""
    raw = _inner("class_subset", root, download, options, ("source", "options", "classes"))
    if "classes" not in options:
        raise DataError("class_subset: data.options.classes is missing (a list of class ids or 'a-b')")
    classes = parse_classes(options["classes"])
    available = int(max(raw.train_y.max(), raw.test_y.max())) + 1
    if classes[-1] >= available:
        raise DataError(f"class_subset: class {classes[-1]} does not exist in {options['source']} "
                        f"(classes 0..{available - 1})")
    relabel = np.full(available, -1, dtype=np.int64)
    relabel[classes] = np.arange(len(classes))
    keep_train, keep_test = relabel[raw.train_y] >= 0, relabel[raw.test_y] >= 0
    names = [raw.class_names[c] for c in classes] if raw.class_names else None
    info = {**raw.info, "derived": {"class_subset": {"source": options["source"], "classes": classes}}}
    return RawData(raw.train_x[keep_train], relabel[raw.train_y[keep_train]], raw.test_x[keep_test],
                   relabel[raw.test_y[keep_test]], names, info=info)


def carve_indices(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of ``labels`` (1-D class ids) that form the validation split: per class ``round(fraction
    * n)`` of its n images, at least 1 and at most n - 1, drawn with ``np.random.RandomState(seed)``."""
    rng = np.random.RandomState(seed)
    picked = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) < 2:
            raise DataError(f"validation_carve: class {int(c)} has {len(members)} training image(s); a validation "
                            "split needs at least 2 per class")
        count = min(max(int(round(fraction * len(members))), 1), len(members) - 1)
        picked.append(rng.permutation(members)[:count])
    return np.sort(np.concatenate(picked))


@register_source("validation_carve")
def validation_carve_source(root, download: bool, options: dict) -> RawData:
    """Another source's training images split into training and validation (served as the test split); its test
    images are dropped unread. options: source, options (the source's), fraction (0.2), seed (0)."""
    raw = _inner("validation_carve", root, download, options, ("source", "options", "fraction", "seed"))
    fraction = options.get("fraction", 0.2)
    if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise DataError(f"validation_carve: data.options.fraction must be a number in (0, 1), got {fraction!r}")
    seed = options.get("seed", 0)
    if not isinstance(seed, int):
        raise DataError(f"validation_carve: data.options.seed must be an integer, got {seed!r}")
    held = carve_indices(raw.train_y, float(fraction), seed)
    rest = np.setdiff1d(np.arange(len(raw.train_y)), held)
    info = {**raw.info, "derived": {**dict(raw.info.get("derived") or {}),
                                    "validation_carve": {"source": options["source"], "fraction": fraction,
                                                         "seed": seed, "validation_images": int(len(held))}}}
    return RawData(raw.train_x[rest], raw.train_y[rest], raw.train_x[held], raw.train_y[held], raw.class_names,
                   info=info)
