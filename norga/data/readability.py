"""Decode every image file a benchmark will read, in parallel, and list the ones that cannot be decoded.

``norga train --dry-run`` uses it (``--dry-run quick`` on a seeded sample), so a folder with broken images is
reported in one pass instead of one file per training restart. In-memory images (``.npz`` arrays, synthetic
data) have nothing to decode and are skipped.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

from PIL import Image
from tqdm.auto import tqdm

QUICK_SAMPLE = 256  # files decoded by --dry-run quick (a seeded sample; all when fewer)


def image_files(*arrays) -> List[str]:
    """The file paths among the items of the image arrays (object arrays of paths; others hold none)."""
    files: List[str] = []
    for array in arrays:
        if getattr(array, "dtype", None) is not None and array.dtype == object:
            files += [item for item in array if isinstance(item, str)]
    return files


def decode_problem(path: str) -> Optional[str]:
    """None if ``path`` decodes to an RGB image (every pixel read), else why not (one line)."""
    try:
        with Image.open(path) as image:
            image.convert("RGB").load()
    except Exception as err:  # noqa: BLE001 - PIL raises many types for broken files; each is a finding
        return f"{type(err).__name__}: {' '.join(str(err).split()) or 'no detail'}"
    return None


def unreadable_images(paths: Sequence[str], sample: Optional[int] = None, workers: int = 8,
                      seed: int = 0, progress: bool = True) -> Tuple[int, List[Tuple[str, str]]]:
    """(files checked, [(path, problem), ...] in path order) over ``paths`` or a seeded sample of ``sample``.

    Decoding runs in ``workers`` threads (PIL releases the GIL while decoding)."""
    chosen = list(paths)
    if sample is not None and len(chosen) > sample:
        chosen = random.Random(seed).sample(chosen, sample)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(tqdm(pool.map(decode_problem, chosen), total=len(chosen), desc="decoding images",
                            leave=False, disable=not progress or not chosen))
    bad = sorted((path, problem) for path, problem in zip(chosen, results) if problem)
    return len(chosen), bad
