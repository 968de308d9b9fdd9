"""A sweep root: ``ROOT/sweep.json`` (the points, written by ``norga sweep`` before it launches anything), a run
folder per point and seed (``ROOT/<point>/seed<S>``) and the logs (``ROOT/logs/<point>/seed<S>/train.log`` and
``exit.json``). ``sweep.json`` is the list of what the sweep holds, not its state: the state is read from the run
folders each time (:mod:`norga.sweep.status`).

    check_root(root)                      # before anything is written: new, empty, or a sweep root norga wrote
    write_root(root, points, totals, spec_path)
    rows = root_rows(root)                # [(point name, seed, RunState)] in the sweep's order
Torch-free.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..outputs import check_output, written_unchanged, write_output
from .records import RECORD_NAME, read_exit_record
from .spec import SweepError
from .status import RunState, run_state

ROOT_FILE = "sweep.json"
ROOT_FORMAT = "norga-sweep/1"
LOGS = "logs"


def log_dir(root: Path) -> Path:
    return Path(root) / LOGS


def record_path(root: Path, label: str) -> Path:
    """The exit record of the run ``label`` (``<point>/seed<S>``)."""
    return log_dir(root) / label / RECORD_NAME


def log_name(label: str) -> str:
    """The launcher's name of the run ``label``: its log is ``ROOT/logs/<label>/train.log``."""
    return f"{label}/train"


def check_root(root: Path, option: str = "--out") -> None:
    """SweepError unless ``root`` may receive a sweep: missing, empty, or holding a ``sweep.json`` norga wrote (then
    the sweep continues there); nothing is written. Also refuses a root inside a run folder, an export or a store."""
    root = Path(root)
    check_output(root / ROOT_FILE, option)  # not inside a zone, not a file's place
    if not root.is_dir() or written_unchanged(root / ROOT_FILE):
        return
    entries = sorted(p.name for p in root.iterdir())
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise SweepError(f"{option} {root} holds files and is not a sweep root (no sweep.json written by norga: "
                         f"{shown}); choose a new or empty {option}, e.g. {root / 'sweep'}")


def read_root(root: Path) -> dict:
    """``ROOT/sweep.json``; SweepError naming the fix when ``root`` is no sweep root."""
    path = Path(root) / ROOT_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != ROOT_FORMAT:
        raise SweepError(f"{root} is not a sweep root (no readable {ROOT_FILE}); give the --out folder of a "
                         "norga sweep, or the sweep file itself")
    return data


def write_root(root: Path, points: Sequence, totals: Sequence[Optional[int]], spec: Optional[Path]) -> Path:
    """Write ``ROOT/sweep.json``: the points of this sweep and those recorded before that it does not name."""
    entries = [{"name": p.name, "seed": p.seed, "folder": p.folder.relative_to(root).as_posix()
                if _below(p.folder, root) else str(p.folder), "overrides": list(p.overrides), "num_tasks": total}
               for p, total in zip(points, totals)]
    known = {(e["name"], e["seed"]) for e in entries}
    try:
        earlier = read_root(root).get("points", [])
    except SweepError:
        earlier = []
    entries += [e for e in earlier if (e.get("name"), e.get("seed")) not in known]
    data = {"format": ROOT_FORMAT, "spec": str(spec) if spec else None, "points": entries}
    return write_output(Path(root) / ROOT_FILE, (json.dumps(data, indent=1) + "\n").encode(), "--out")


def _below(path: Path, root: Path) -> bool:
    try:
        Path(path).relative_to(root)
        return True
    except ValueError:
        return False


def root_rows(root: Path) -> List[Tuple[str, int, RunState]]:
    """(point, seed, state) of every run ``ROOT/sweep.json`` lists, in its order."""
    rows = []
    for entry in read_root(root).get("points", []):
        folder = Path(root) / entry["folder"]
        label = f"{entry['name']}/seed{entry['seed']}"
        rows.append((entry["name"], int(entry["seed"]),
                     run_state(folder, entry.get("num_tasks"), read_exit_record(record_path(root, label)))))
    return rows


def states_of(points: Sequence, root: Path, totals: Dict[str, Optional[int]]) -> List[RunState]:
    """The state of each point (``totals``: label -> number of tasks)."""
    return [run_state(p.folder, totals.get(p.label), read_exit_record(record_path(root, p.label))) for p in points]


def point_folders(root: Path) -> List[Tuple[str, List[Path]]]:
    """(point, its seeds' run folders that exist) of every point of the sweep root, in the sweep's order: the
    groups ``norga summarize ROOT`` aggregates over seeds."""
    groups: Dict[str, List[Path]] = {}
    for entry in read_root(root).get("points", []):
        folder = Path(root) / entry["folder"]
        groups.setdefault(entry["name"], [])
        if folder.is_dir():
            groups[entry["name"]].append(folder)
    return list(groups.items())
