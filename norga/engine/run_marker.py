"""Which folders norga may write into: its run marker ``norga-run.json`` and the recognition of a run folder.

``norga train`` writes only into a missing or empty folder, or into a folder that is a norga run
(:func:`recognise_folder`, called before anything is written, even the lock):

* **marked**: it holds ``norga-run.json`` (:class:`RunMarker`: the run's id and config hash), the first
  file a run writes (:func:`claim_folder`, once model and data are built);
* **unmarked** (written by a norga before the marker existed): every entry is a name norga writes
  (:data:`NORGA_NAMES`) and norga's provenance is there: a checkpoint matching its sha256 file, a
  ``metrics.json`` naming the norga version, or a ``log.txt`` that started a run; the marker is added when
  training continues in it (its existing checkpoints are then the run's ``adopted_tasks``).

Anything else, e.g. a folder with the user's own ``config.yaml``, ``metrics.json`` or ``plots/``, is one
:class:`RunError` naming the files and the fix. A ``--config`` that lies in the output folder under a name
norga writes is refused too (:func:`refuse_config_inside`): training would replace it. This module
imports no torch.
"""
from __future__ import annotations

import datetime
import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

from ..errors import RunError
from ..files import sha256_hex
from ..outputs import Zone, write_output

MARKER = "norga-run.json"
FORMAT = "norga-run"
# what norga itself writes at the top of a run folder (train, eval, routes)
NORGA_FILES = ("config.yaml", "metrics.json", "acc_matrix.csv", "log.txt", "epochs.jsonl", "eval.json", "routes.json",
               "trackers.json", MARKER)
NORGA_FOLDERS = ("checkpoints", "plots", "tensorboard", "mlruns")
NORGA_NAMES = NORGA_FILES + NORGA_FOLDERS
LOCK = ".lock"


@dataclass
class RunMarker:
    """``norga-run.json``: ``run_id`` (32 hex digits, fixed for the run's life), ``config_hash`` (the hash of the
    config of its latest tasks, :func:`norga.engine.provenance.config_hash`), when and by which norga it was
    created, and ``adopted_tasks``: checkpoints of an older norga (without run identity) the run took over."""

    run_id: str
    config_hash: str
    created: str
    norga: str
    adopted_tasks: int = 0

    def to_json(self) -> bytes:
        return (json.dumps({"format": FORMAT, **asdict(self)}, indent=2) + "\n").encode()


def new_marker(config_hash: str, run_id: Optional[str] = None, adopted_tasks: int = 0) -> RunMarker:
    """A marker for a run starting now (a fresh id unless ``run_id`` is given, e.g. read from its checkpoints)."""
    from .._version import __version__

    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return RunMarker(run_id or uuid.uuid4().hex, config_hash, now, __version__, adopted_tasks)


def read_marker(root: Path) -> Optional[RunMarker]:
    """The folder's marker, None if it has none; RunError if the file is there but not norga's marker."""
    path = Path(root) / MARKER
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        if raw.get("format") != FORMAT:
            raise ValueError("not a norga run marker")
        return RunMarker(str(raw["run_id"]), str(raw["config_hash"]), str(raw.get("created", "")),
                         str(raw.get("norga", "")), int(raw.get("adopted_tasks", 0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise RunError(f"{path} is unreadable or not a norga run marker ({type(err).__name__}); restore it, or use a "
                       "new --output-dir") from err


def write_marker(root: Path, marker: RunMarker) -> None:
    """The folder's marker, through the write guard (:mod:`norga.outputs`; the folder is the zone it marks)."""
    write_output(Path(root) / MARKER, marker.to_json(), "--output-dir", Zone(Path(root)))  # a marker: not recorded


def _entries(root: Path) -> List[str]:
    """Top-level entries of ``root`` other than norga's leftovers (its lock file, temp files of a killed write)."""
    return sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir()
                  if p.name != LOCK and not (p.name.startswith(".") and p.name.endswith(".tmp")))


def _has_provenance(root: Path) -> bool:
    """Whether an unmarked folder carries what only norga writes (see the module docstring)."""
    try:
        metrics = json.loads((root / "metrics.json").read_text())
        if isinstance(metrics, dict) and "completed_tasks" in metrics and isinstance(metrics.get("norga"), dict):
            return True
    except (OSError, ValueError):
        pass
    for checksum in sorted((root / "checkpoints").glob("task_*.pt.sha256")):
        try:
            expected = checksum.read_text().split()[0].lower()
            if sha256_hex(checksum.with_suffix("").read_bytes()) == expected:
                return True
        except (OSError, IndexError, UnicodeDecodeError):
            continue
    try:
        return any(" new run in " in line for line in (root / "log.txt").read_text(errors="replace").splitlines())
    except OSError:
        return False


def recognise_folder(root: Path, purpose: str = "--output-dir") -> str:
    """``"new"`` (missing), ``"empty"``, ``"marked"`` or ``"unmarked"`` (a run of an older norga); RunError for any
    other folder (naming its files). Reads only."""
    root = Path(root)
    if not root.exists():
        return "new"
    if not root.is_dir():
        raise RunError(f"output folder {root} exists and is not a folder; choose another {purpose}")
    entries = _entries(root)
    if not entries:
        return "empty"
    if read_marker(root) is not None:
        return "marked"
    foreign = [name for name in entries if name.rstrip("/") not in NORGA_NAMES]
    if not foreign and _has_provenance(root):
        return "unmarked"
    listed = ", ".join((foreign or entries)[:6]) + (" ..." if len(foreign or entries) > 6 else "")
    raise RunError(f"{root} is not a norga run folder (no {MARKER}) and holds files norga did not write ({listed}); "
                   f"norga writes only into a new or empty folder or its own run folder and never replaces your "
                   f"files: choose a new or empty {purpose} (e.g. {root / 'run'})")


def require_run_folder(root: Path) -> str:
    """``"marked"`` or ``"unmarked"`` for a folder ``norga eval`` / ``norga routes`` may read; RunError otherwise."""
    root = Path(root)
    if root.is_file():
        raise RunError(f"--run {root} is a file, not a run folder; give the folder norga train wrote "
                       "(its --output-dir)")
    if not root.is_dir():
        raise RunError(f"run folder not found: {root}")
    try:
        kind = recognise_folder(root, "--run")
    except RunError as err:
        if (root / MARKER).exists():
            raise RunError(f"{root / MARKER} is not norga's run marker (a file of that name written by another "
                           f"program, or damaged), so {root} cannot be read as a run: restore the {MARKER} norga "
                           "wrote, or give the folder norga train wrote (--run)") from err
        raise RunError(f"{root} is not a norga run folder: no {MARKER}, and it holds files norga did not write; "
                       "give the folder norga train wrote (--output-dir)") from err
    if kind == "empty":
        raise RunError(f"{root} is empty: not a norga run folder; give the folder norga train wrote (--output-dir)")
    return kind


def written_by_norga(path: Path) -> Optional[str]:
    """The name norga writes that ``path`` has inside a run folder (``config.yaml``, ``checkpoints/...``), or None."""
    parts = Path(path).parts
    if len(parts) == 1 and parts[0] in NORGA_FILES:
        return parts[0]
    return "/".join(parts) if len(parts) > 1 and parts[0] in NORGA_FOLDERS else None


def refuse_config_inside(config_file: Optional[str], out: Path) -> None:
    """RunError when the ``--config`` file lies in the output folder under a name norga writes there."""
    if not config_file:
        return
    config, folder = Path(config_file).resolve(), Path(out).resolve()
    try:
        inside = config.relative_to(folder)
    except ValueError:
        return
    name = written_by_norga(inside)
    if name is not None:
        raise RunError(f"--config {config_file} lies in the output folder {out}, where norga writes its own {name}: "
                       f"training would replace your file; move the config out of {out} (e.g. to {out}.yaml), or "
                       "choose another --output-dir")
