"""The archives of a benchmark and the steps on one archive: fetch (mirror, earlier download, or urllib), verify its
checksum, extract it into the staging folder ``ROOT/.norga-partial/``. :mod:`norga.data.prepare` registers the
preparers and runs the steps (:mod:`norga.data.install`); this module imports neither, so the import graph has
no circle.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..outputs import check_output, make_output_folder
from .sources import DataError

PARTIAL = ".norga-partial"  # extraction folder under ROOT; removed after each run
DOWNLOADS = "downloads"  # where downloaded archives are kept under ROOT (delete it to save space)


@dataclass(frozen=True)
class Archive:
    """One file to fetch. ``name``: its path under ``--mirror``/``ROOT/downloads`` and its key for ``--sha256``.

    ``checksum``: ``"md5:<hex>"``, ``"sha256:<hex>"``, ``"git-sha1:<hex>"`` (git's blob id of the file) or None;
    ``source``: who publishes it. ``places``: (entry in the extracted archive, destination under ROOT) pairs.
    ``unpack``: ``"extract"`` (tar, tar.gz, tgz, zip, or a single .gz file) or ``"copy"``.
    """

    name: str
    urls: Tuple[str, ...]
    checksum: Optional[str]
    source: str
    places: Tuple[Tuple[str, str], ...]
    unpack: str = "extract"


@dataclass(frozen=True)
class Preparer:
    """The archives of a benchmark, its final layout under ROOT (text) and its ``--check`` function."""

    benchmark: str
    archives: Tuple[Archive, ...]
    layout: str
    check: Callable[..., object]
    root: str = "data"  # the default --root: data.root of the shipped configs of this benchmark
    contents: Tuple[object, ...] = ()  # the files it needs, how each is verified (norga.data.contents.Needed)


def digests(path: Path) -> Dict[str, str]:
    """md5, sha256 and git-sha1 (``sha1("blob <bytes>\\0" + content)``) of a file, read once in 1 MiB blocks."""
    md5, sha256, git = hashlib.md5(), hashlib.sha256(), hashlib.sha1()
    git.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            md5.update(block), sha256.update(block), git.update(block)
    return {"md5": md5.hexdigest(), "sha256": sha256.hexdigest(), "git-sha1": git.hexdigest()}


def _pending(preparer: Preparer, root: Path) -> List[Archive]:
    """The archives with a destination missing under ``root``."""
    return [a for a in preparer.archives if not all((root / dst).exists() for _, dst in a.places)]


def manual_steps(preparer: Preparer, root: Path, archives: Sequence[Archive]) -> str:
    """What to download and where to put it, for a machine without internet."""
    lines = [f"To prepare {preparer.benchmark} by hand under {root}:"]
    for i, a in enumerate(archives, 1):
        check = f"{a.checksum} ({a.source})" if a.checksum else f"no published checksum ({a.source})"
        lines.append(f"  {i}. {a.name}  [{check}]")
        lines += [f"       from {url}" for url in a.urls]
        how = "extract it" if a.unpack == "extract" else "copy it"
        lines += [f"       {how}: its {src} goes to {root / dst}" for src, dst in a.places]
    lines.append("Final layout:")
    lines += [f"  {line}" for line in preparer.layout.format(root=root).splitlines()]
    lines.append(f"Or download the files above into a folder F (keeping the names shown) and run: norga data "
                 f"prepare {preparer.benchmark} --root {root} --mirror F")
    return "\n".join(lines)


def download(urls: Sequence[str], dest: Path, progress: bool = True) -> None:
    """Fetch the first URL that answers into ``dest`` (via ``dest.part``); OSError naming every URL tried."""
    from tqdm.auto import tqdm

    check_output(dest, "--root")  # the download lands through the guard: never over a file of yours
    make_output_folder(dest.parent, "--root")
    part, errors = dest.with_name(dest.name + ".part"), []
    for url in urls:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "norga-data-prepare"})
            with urllib.request.urlopen(request, timeout=60) as response, open(part, "wb") as f:  # guarded: checked
                size = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(total=size, unit="B", unit_scale=True, desc=dest.name, disable=not progress) as bar:
                    for block in iter(lambda: response.read(1 << 20), b""):
                        f.write(block)
                        bar.update(len(block))
            os.replace(part, dest)
            return
        except (urllib.error.URLError, OSError, ValueError) as err:
            errors.append(f"{url}: {getattr(err, 'reason', err)}")
            part.unlink(missing_ok=True)
    raise OSError("; ".join(errors))


def _fetch(preparer: Preparer, archive: Archive, root: Path, mirror: Optional[Path], progress: bool
           ) -> Tuple[Path, bool]:
    """(local file of ``archive``, whether norga downloaded it): the mirror's, an earlier download, or a new one."""
    if mirror is not None and (mirror / archive.name).is_file():
        return mirror / archive.name, False
    local = root / DOWNLOADS / archive.name
    if local.is_file():
        return local, True
    if not archive.urls:  # the user's own copy (no public direct link)
        print(manual_steps(preparer, root, _pending(preparer, root)))
        where = f"is not in the mirror {mirror}" if mirror is not None else "needs --mirror F"
        raise DataError(f"{preparer.benchmark}: {archive.name} {where}; it cannot be downloaded automatically, "
                        "place it as printed above and pass --mirror F")
    try:
        download(archive.urls, local, progress)
    except OSError as err:
        print(manual_steps(preparer, root, _pending(preparer, root)))
        where = f"is not in the mirror {mirror} and " if mirror is not None else ""
        raise DataError(f"{preparer.benchmark}: {archive.name} {where}could not be downloaded ({err}); "
                        "place the files by hand as printed above") from err
    return local, True


def verify(archive: Archive, path: Path, expected: Optional[str]) -> str:
    """A line saying how ``path`` was verified; DataError if its checksum differs from ``expected``."""
    found = digests(path)
    if expected is None:
        return (f"{archive.name}: NOT VERIFIED, no published checksum ({archive.source}); its sha256 is "
                f"{found['sha256']} (pass --sha256 {archive.name}=HEX to check it against a trusted value)")
    kind, _, value = expected.partition(":")
    if found[kind] != value.lower():
        raise DataError(f"{archive.name}: checksum mismatch, {kind} of {path} is {found[kind]}, expected {value} "
                        f"({archive.source}); the file is corrupt, truncated or another version; nothing was "
                        "extracted")
    return f"{archive.name}: {kind} verified ({value}); sha256 {found['sha256']}"


def _expected(archive: Archive, overrides: Mapping[str, str]) -> Optional[str]:
    return f"sha256:{overrides[archive.name]}" if archive.name in overrides else archive.checksum


def extract(path: Path, target: Path) -> None:
    """Unpack a tar (any compression), a zip, or a single gzipped file into ``target``.

    Tar members that would land outside ``target`` (absolute paths, ``..``, links out) are refused
    (``tarfile``'s ``data`` filter, or an equivalent path check on Pythons without it)."""
    if tarfile.is_tarfile(path):
        with tarfile.open(path, "r:*") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, filter="data")
            else:  # pragma: no cover - Pythons before the 2023 security releases
                bad = [m.name for m in tar.getmembers() if not _inside(target, target / m.name)
                       or (m.issym() or m.islnk()) and not _inside(target, target / Path(m.name).parent / m.linkname)]
                if bad:
                    raise DataError(f"{path}: members outside the archive's folder, e.g. {bad[:3]}")
                tar.extractall(target)
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            archive.extractall(target)  # zipfile drops absolute and '..' parts itself
    elif path.suffix == ".gz":
        with gzip.open(path, "rb") as src, open(target / path.stem, "wb") as dst:  # guarded: staging folder
            shutil.copyfileobj(src, dst, 1 << 20)  # guarded: into ROOT/.norga-partial, placed by norga.data.placing
    else:
        raise DataError(f"{path}: neither a tar, a zip nor a .gz file")


def _inside(folder: Path, path: Path) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)
