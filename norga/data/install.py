"""The steps of ``norga data prepare`` after the decision to fetch: survey what ROOT holds, then fetch, verify,
extract, verify the content, and place (see :mod:`norga.data.prepare` for the whole story).

:func:`survey` verifies every item the benchmark needs (:mod:`norga.data.contents`) that is in place: a file
with the wrong content stops the run (one line naming it: delete it, norga never replaces it); a missing file,
or a folder lacking files, makes its archive pending. :func:`install` extracts the pending archives into
``ROOT/.norga-partial/``, verifies the items there (an archive that is not the benchmark's places nothing),
and only then places them through the write guard (:mod:`norga.data.placing`).
"""
from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import archives
from .archives import DOWNLOADS, PARTIAL, _expected, verify
from .contents import Problem, bad_file_error, covers, locate, needed_items, summary, under, verify_items
from .placing import place, plan, record
from .sources import DataError


def _archives_of(preparer, path: str) -> list:
    return [a for a in preparer.archives if covers(a, path)]


def survey(preparer, root: Path, missing: Sequence) -> Tuple[list, list]:
    """(archives to fetch, items verified in place): ``missing`` (archives with a destination missing) plus those
    of incomplete items; DataError for an item in place with the wrong content."""
    items = [i for i in needed_items(preparer) if not any(covers(a, i.path) for a in missing)]
    good, bad = verify_items(items, lambda p: root / p)
    wrong = [p for p in bad if not p.incomplete or not _archives_of(preparer, p.item.path)]
    if wrong:
        more = f" ({len(wrong) - 1} more such files)" if len(wrong) > 1 else ""
        raise DataError(bad_file_error(preparer.benchmark, wrong[0], "delete it (norga never replaces a file it "
                                       f"did not write) and run the same command again{more}"))
    pending = set(missing) | {a for p in bad for a in _archives_of(preparer, p.item.path)}
    return [a for a in preparer.archives if a in pending], good


def _extract(archive, path: Path, work: Path) -> Dict[str, Path]:
    """Extract (or copy) ``path`` into ``work``; {destination under ROOT: its extracted path}."""

    target = work / archive.name.replace("/", "_")
    target.mkdir(parents=True)
    if archive.unpack == "copy":
        shutil.copyfile(path, target / Path(archive.name).name)  # guarded: staging, placed by norga.data.placing
    else:
        try:
            archives.extract(path, target)  # looked up here: tests replace it to interrupt
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as err:  # a broken archive
            raise DataError(f"{archive.name}: cannot extract {path} ({type(err).__name__}: {err})") from err
    absent = [src for src, _ in archive.places if not (target / src).exists()]
    if absent:
        raise DataError(f"{archive.name}: {path} has no {absent} inside; it is not the archive of this benchmark: "
                        f"give the right file and run the same command again (nothing was extracted)")
    return {dst: target / src for src, dst in archive.places}


def _not_the_archive(preparer, problem: Problem, fetched) -> DataError:
    """The one line for an extracted archive whose content is not the benchmark's (a download of ours is deleted)."""
    archive, path, ours = next(f for f in fetched if covers(f[0], problem.item.path))
    if ours:
        path.unlink(missing_ok=True)
        fix = "the download was deleted; run the same command again, or give the right file with --mirror F"
    else:
        fix = f"replace {path} with the right file and run the same command again"
    return DataError(f"{archive.name} ({path}): its {problem.item.path} {problem.why}; it is not the "
                     f"{preparer.benchmark} archive, nothing was extracted; {fix}")


def install(preparer, root: Path, pending: Sequence, mirror: Optional[Path], overrides: Mapping[str, str],
            progress: bool) -> List[str]:
    """Fetch and verify (all), extract, verify the content, then place the ``pending`` archives; lines to report."""

    fetched = [(a, *archives._fetch(preparer, a, root, mirror, progress)) for a in pending]
    lines = []
    for archive, path, ours in fetched:  # verify everything before extracting anything
        try:
            lines.append(verify(archive, path, _expected(archive, overrides)))
        except DataError as err:
            if not ours:  # a mirror's file is the user's: left alone
                raise DataError(f"{err}; replace {path} with a good copy") from None
            path.unlink(missing_ok=True)  # a bad download is not kept
            raise DataError(f"{err}; the download was deleted, run again to fetch it again") from None
    work = root / PARTIAL
    shutil.rmtree(work, ignore_errors=True)  # left by an interrupted run
    try:
        good = _extract_and_place(preparer, root, fetched, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines.append(summary(preparer.benchmark, good))
    kept = f" (downloaded archives kept in {root / DOWNLOADS})" if any(ours for _, _, ours in fetched) else ""
    lines.append(f"{preparer.benchmark}: prepared under {root}{kept}")
    return lines


def _extract_and_place(preparer, root: Path, fetched, work: Path) -> list:
    """Extract every fetched archive, verify the items they hold, place them; the items verified."""
    staged: Dict[str, Path] = {}
    for archive, path, _ in fetched:
        staged.update(_extract(archive, path, work))
    items = [i for i in needed_items(preparer) if any(covers(a, i.path) for a, _, _ in fetched)]
    good, bad = verify_items(items, lambda p: locate(p, root, staged))
    if bad:
        raise _not_the_archive(preparer, bad[0], fetched)
    merged = [dst for dst in staged if (root / dst).exists()]
    place(plan([(staged[dst], root / dst) for dst in staged], root))
    record({root / item.path: digest for item, _, _, digest in good if digest})
    if merged:  # an existing folder completed: what it holds now must verify too
        _, bad = verify_items([i for i in items if any(under(d, i.path) for d in merged)], lambda p: root / p)
        if bad:
            raise DataError(f"{bad[0].path}: {bad[0].why} after the archive was merged into the existing "
                            f"{root / merged[0]}; move your own files out of it and run the same command again")
    return good
