"""The tune folder, marked by ``norga-tune.json``.

``norga tune`` writes only into a missing or empty folder or into a tune folder (its marker names the spec's
fingerprint and study, so a folder of another spec is refused). Every file goes through the write guard
(:func:`norga.outputs.write_output`: recorded in the folder's manifest, so a file you edited is never replaced);
its trial and final-evaluation runs are run folders (zones of their own) inside it, the workers' logs go through
the sweep launcher's guard. The SQLite study file is checked by the guard before SQLite creates it.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Optional

from .._version import __version__
from ..errors import NorgaError
from ..outputs import check_output, make_output_folder, write_output
from .spec import TuneSpec

OPTION = "--out"
FORMAT = "norga-tune/1"
DATABASE = "study.db"
TUNE_MARKER = "norga-tune.json"


def read_marker(root: Path) -> Optional[dict]:
    """The folder's marker, None when it has none; NorgaError when it is not norga's."""
    path = Path(root) / TUNE_MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise NorgaError(f"{path} is not readable ({err}); restore the file norga wrote or use another --out") from err
    if not isinstance(marker, dict) or marker.get("format") != FORMAT:
        raise NorgaError(f"{path} is not norga's tune marker; restore the file norga wrote or use another --out")
    return marker


def claim_folder(root: Path, spec: TuneSpec, label: str) -> Path:
    """Make ``root`` the spec's tune folder (new, empty, or already this spec's); refuse anything else."""
    root = Path(root)
    marker = read_marker(root) if root.is_dir() else None
    if marker is not None:
        if marker.get("spec") != spec.fingerprint():
            raise NorgaError(f"{root} is the tune folder of another spec (study {marker.get('study')!r}); its config, "
                             "set, space, protocol, objective or tuning seeds differ: use another --out")
        return root
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        what = "a file" if not root.is_dir() else "a folder that is not a norga tune folder (no norga-tune.json)"
        raise NorgaError(f"--out {root} is {what}; choose a new or empty --out")
    make_output_folder(root, OPTION)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    marker = {"format": FORMAT, "spec": spec.fingerprint(), "study": spec.study_name, "protocol": spec.protocol_name,
              "label": label or None, "created": now, "norga": __version__}
    write_output(root / TUNE_MARKER, (json.dumps(marker, indent=1) + "\n").encode(), OPTION)
    return root


def check_database(root: Path) -> Path:
    """The default SQLite file, checked by the guard (norga's own or not yet there) before SQLite opens it."""
    path = Path(root) / DATABASE
    if not path.exists():
        check_output(path, OPTION)
    return path


def write_file(root: Path, name: str, data: bytes) -> Path:
    """One output of the tune folder (``name`` relative to it), through the guard."""
    return write_output(Path(root) / name, data, OPTION)
