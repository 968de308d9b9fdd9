"""``norga data prepare``: download a benchmark's archives, verify their checksums, extract them into the
layout the loaders read.

A :class:`Preparer` per benchmark (registered in :data:`PREPARERS`, see :mod:`norga.data.preparers`)
declares its :class:`Archive` files: URLs, the checksum we ship (``md5:``/``sha256:``/``git-sha1:`` + hex,
or None where nothing is published), and where each extracted entry goes under ``ROOT``. :func:`prepare`

1. verifies the content of every file the benchmark needs that is in place (``Preparer.contents``,
   :mod:`norga.data.contents`: by its published checksum or by reading it); "nothing to do" only when all
   verify; a file with the wrong content stops the run (one line naming it: delete it), a missing file makes
   its archive pending;
2. takes each pending archive from ``--mirror DIR`` (same relative name; a missing DIR is one line), from an
   earlier download in ``ROOT/downloads/``, or downloads it (urllib, tqdm, ``.part`` renamed when complete);
3. verifies every archive before extracting any: a wrong checksum is one error and nothing is extracted;
4. extracts into ``ROOT/.norga-partial/``, verifies the content there (an archive that is not the benchmark's
   places nothing), then renames the entries into place through the write guard (:mod:`norga.data.placing`:
   never over a file norga did not write), so an interrupted run leaves no half-extracted dataset.

Offline (``--offline``, or a download that fails) it prints the URLs, checksums and layout to place by hand.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from ..outputs import zone_of
from ..registry import registrar
from .archives import (DOWNLOADS, PARTIAL, Archive, Preparer, _pending, digests, download,  # noqa: F401
                       extract, manual_steps, verify)
from .sources import DataError

PREPARERS: Dict[str, Preparer] = {}
register_preparer = registrar(PREPARERS, "data preparer")  # register_preparer(name)(Preparer(...))


def get_preparer(benchmark: str) -> Preparer:
    """The registered preparer of ``benchmark`` (the shipped ones register when ``norga.data`` is imported)."""
    if benchmark not in PREPARERS:
        raise DataError(f"norga data prepare: no preparer for {benchmark!r}; available: {sorted(PREPARERS)}")
    return PREPARERS[benchmark]


def prepare(benchmark: str, root, mirror=None, offline: bool = False, sha256: Optional[Mapping[str, str]] = None,
            progress: bool = True) -> List[str]:
    """Prepare ``benchmark`` under ``root`` (see the module docstring); returns the lines it reports."""
    preparer, root = get_preparer(benchmark), Path(root)
    overrides = {k: v.lower() for k, v in (sha256 or {}).items()}
    unknown = sorted(set(overrides) - {a.name for a in preparer.archives})
    if unknown:
        raise DataError(f"--sha256 names {unknown}, which are not files of {benchmark}; its files: "
                        f"{[a.name for a in preparer.archives]}")
    from .contents import summary
    from .install import install, survey

    _check_root(root)
    pending, verified = survey(preparer, root, _pending(preparer, root))
    if not pending:
        return [summary(benchmark, verified), f"{benchmark}: nothing to do, every file is in place and verified "
                f"under {root} (check the images too with: norga data prepare {benchmark} --root {root} --check)"]
    if offline:
        return [manual_steps(preparer, root, pending)]
    return install(preparer, root, pending, _mirror(mirror, pending), overrides, progress)


def _check_root(root: Path) -> None:
    """DataError before anything is read or staged when ``--root`` is a file or lies inside a folder norga owns
    (a run folder, an export, a feature store: :func:`norga.outputs.zone_of`)."""
    if root.exists() and not root.is_dir():
        raise DataError(f"--root {root} is a file; give a folder (new, or the data folder of your configs)")
    found = zone_of(root)
    if found is not None:
        raise DataError(f"--root {root} lies inside the {found[1]} {found[0]}, whose files norga manages; choose "
                        "another --root")


def _mirror(mirror, pending: Sequence[Archive]) -> Optional[Path]:
    """``--mirror`` as a Path; DataError when it is not an existing folder."""
    if not mirror:
        return None
    if not Path(mirror).is_dir():
        what = "is a file, not a folder" if Path(mirror).exists() else "does not exist"
        raise DataError(f"--mirror {mirror} {what}; give the folder holding {', '.join(a.name for a in pending)} "
                        "(or leave --mirror out to download them)")
    return Path(mirror)


def prepare_url(url: str, root, progress: bool = True) -> List[str]:
    """Fetch, verify and extract the one shipped archive served at ``url`` (what ``data.download: true`` uses)."""
    get_preparer("cifar100")  # registers the shipped preparers
    for preparer in PREPARERS.values():
        for archive in preparer.archives:
            if url in archive.urls:
                from .install import install, survey

                pending = [a for a in survey(preparer, Path(root), _pending(preparer, Path(root)))[0] if a is archive]
                return install(preparer, Path(root), pending, None, {}, progress) if pending else []
    raise DataError(f"no shipped archive is downloaded from {url}; norga data list shows them")
