"""Run directory: atomic writes, verified checkpoints, one process per folder.

Layout of ``DIR`` (tasks are numbered from 0 everywhere)::

    norga-run.json           the run's marker: run id and config hash (see norga.engine.run_marker)
    config.yaml              fully resolved config
    metrics.json             FA/CA/FM/BWT, matrices, TII, timings (completed tasks only)
    acc_matrix.csv           rows = evaluated task i, columns = after learning task t
    log.txt                  human-readable log
    checkpoints/task_XX.pt   state after task XX (the method's name and state, e.g. prompts, gates, heads and
                             that task's statistics; the task's evaluation row; the config; the run id and
                             config hash, see norga.engine.run_identity; the inputs: backbone weights' and
                             data split's checksums, see norga.engine.run_inputs)
    checkpoints/task_XX.pt.sha256   its checksum (``sha256sum -c`` format); a task is complete only when this
                             file exists and matches (a checkpoint without it cannot be verified)
    .lock                    present while a process trains into the folder (holds its pid)

Guarantees: every file goes through the write guard (:mod:`norga.outputs`; the folder is a zone) and is written
to a temp file in the same folder, fsync'ed, renamed over the old one and the folder fsync'ed, so an interrupted
write never replaces a good file; files get the permissions of any file the user creates (0666 minus the umask).
A checkpoint's checksum is written after the checkpoint itself, so a crash in between leaves the task
incomplete, never half-trusted. Checkpoints are loaded with ``torch.load(weights_only=True)`` (no code runs on
load). ``metrics.json`` is derived from the checkpoints' evaluation rows, rebuilt from them by training and
checked against them by every reader (:meth:`RunDir.read_metrics`, :mod:`norga.engine.run_truth`).
"""
from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch
import yaml

from ..errors import RunError
from ..files import atomic_write_bytes, sha256_hex, write_failure
from ..outputs import Zone, check_output, make_output_folder
from .folder_lock import RunLock
from .run_support import QuietFileHandler, code_version, non_finite_key, run_logger  # noqa: F401

OPTION = "--output-dir"  # the option that chose the folder, named by the write guard's messages


@dataclass
class RunState:
    """What a scan of the checkpoints found: ``done`` leading intact tasks and notes for the log."""

    done: int = 0
    notes: List[str] = field(default_factory=list)
    corrupt: Optional[str] = None  # what is wrong with the first checkpoint not intact (corrupt, no checksum)


class RunDir:
    """Paths and verified reads/writes of one run folder (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"
        self._records: Dict[int, dict] = {}  # task -> what its verified checkpoint records (see :meth:`record`)

    def _write(self, path: Path, data: bytes) -> None:
        """One file of the folder, through the write guard (:mod:`norga.outputs`: the run folder is its zone),
        written atomically."""
        check_output(path, OPTION, Zone(self.root))
        make_output_folder(Path(path).parent, OPTION, Zone(self.root))
        atomic_write_bytes(path, data)  # guarded: checked above (tests/faults.py patches this call to kill)

    # ---- checkpoints ---------------------------------------------------
    def checkpoint_path(self, task: int) -> Path:
        return self.checkpoints / f"task_{task:02d}.pt"

    def checksum_path(self, task: int) -> Path:
        return self.checkpoints / f"task_{task:02d}.pt.sha256"

    def _name(self, task: int) -> str:
        return f"checkpoints/task_{task:02d}.pt (task {task})"

    def save_checkpoint(self, task: int, state: dict) -> None:
        """Checkpoint first, then its checksum: the task counts as complete only once both exist."""
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        self._write(self.checkpoint_path(task), data)
        line = f"{sha256_hex(data)}  {self.checkpoint_path(task).name}\n"
        self._write(self.checksum_path(task), line.encode())
        self._remember(task, state)

    def _remember(self, task: int, state: dict) -> None:
        self._records[task] = {k: state.get(k) for k in ("task", "run", "inputs", "config", "evaluation")}

    def record(self, task: int) -> dict:
        """What verified checkpoint ``task`` records besides the method's state (``task``, ``run``, ``inputs``,
        ``config``, ``evaluation``): kept from this process's load or save, else loaded (RunError if not intact)."""
        if task not in self._records:
            self.load_checkpoint(task)
        return self._records[task]

    def unverified(self, task: int) -> str:
        """The problem of a checkpoint present without its checksum file (deleted, or its write interrupted)."""
        return (f"{self._name(task)} has no checksum file (task_{task:02d}.pt.sha256 was deleted, or its write "
                "was interrupted): the task cannot be verified")

    def _problem(self, task: int) -> Optional[str]:
        """None if checkpoint ``task`` matches its checksum, else what is wrong."""
        try:
            expected = self.checksum_path(task).read_text().split()[0].lower()
        except (OSError, IndexError, UnicodeDecodeError):
            return "no checksum"
        try:
            actual = sha256_hex(self.checkpoint_path(task).read_bytes())
        except OSError as err:
            return f"unreadable ({err.strerror or err})"
        return None if actual == expected else "sha256 mismatch: the file is truncated or was modified"

    def verified_bytes(self, task: int) -> bytes:
        """Checkpoint bytes after checking them against the checksum file (RunError otherwise)."""
        if self.checkpoint_path(task).is_file() and not self.checksum_path(task).is_file():
            raise RunError(f"{self.root}: {self.unverified(task)}; 'norga train' on this folder trains task {task} "
                           "again")
        try:
            data = self.checkpoint_path(task).read_bytes()
            expected = self.checksum_path(task).read_text().split()[0].lower()
        except (OSError, IndexError, UnicodeDecodeError) as err:
            raise RunError(f"{self.root}: {self._name(task)} or its checksum file cannot be read ({err})") from err
        if sha256_hex(data) != expected:
            raise RunError(f"{self.root}: {self._name(task)} is corrupt (sha256 mismatch: truncated or modified); "
                           f"'norga train' on this folder trains task {task} again")
        return data

    def load_checkpoint(self, task: int) -> dict:
        """Verified checkpoint, loaded with ``weights_only=True`` (no pickled code is executed)."""
        data = self.verified_bytes(task)
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unpickling failure is the same user-facing problem
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RunError(f"{self.root}: {self._name(task)} cannot be loaded safely ({first}); it was not "
                           "written by this norga version: use a new --output-dir") from err
        if isinstance(state, dict):
            self._remember(task, state)
        return state

    def scan(self, num_tasks: Optional[int] = None) -> RunState:
        """Leading tasks whose checkpoint matches its checksum; stops at the first that does not.

        A checkpoint without checksum file is an interrupted write; a corrupt one is
        reported (``state.corrupt``). Either way training redoes that task and overwrites
        it. Checkpoints without checksum files followed by later results come from an
        older norga and are refused (:class:`RunError`), as is a gap (a checkpoint not intact before a later one).
        """
        state = RunState()
        limit = num_tasks if num_tasks is not None else 10**6
        while state.done < limit:
            t = state.done
            if not self.checkpoint_path(t).is_file():
                self._refuse_gap(t, "is missing")
                break
            problem = self._problem(t)
            if problem is None:
                state.done += 1
                continue
            if problem == "no checksum":
                self._refuse_legacy(t)
            self._refuse_gap(t, "has no checksum file" if problem == "no checksum" else f"is corrupt ({problem})")
            if problem == "no checksum":
                state.corrupt = self.unverified(t)
                state.notes.append(f"{self._name(t)} has no checksum file: its write was interrupted; "
                                   f"task {t} is trained again")
            else:
                state.corrupt = f"{self._name(t)} is corrupt ({problem})"
                state.notes.append(f"{state.corrupt}; resuming after the last intact task: task {t} is trained "
                                   "again")
            break
        return state

    def _refuse_gap(self, task: int, problem: str) -> None:
        """RunError when checkpoint ``task`` is not intact but a later task's file exists: norga writes them in order,
        so the folder's checkpoints no longer form one run (training would overwrite the later ones)."""
        later = sorted(p.name for p in self.checkpoints.glob("task_*.pt*") if p.name[5:7].isdigit()
                       and int(p.name[5:7]) > task and p.name.endswith((".pt", ".pt.sha256")))
        if later:
            files = [name for name in later if name.endswith(".pt")] or later
            listed = ", ".join(files[:4]) + (" ..." if len(files) > 4 else "")
            raise RunError(f"{self.root}: {self._name(task)} {problem} while later checkpoints exist ({listed}); "
                           f"nothing was written: put back task_{task:02d}.pt, or "
                           f"move the later checkpoints out of the folder to train again from task {task}, or use a "
                           "new --output-dir")

    def _refuse_legacy(self, task: int) -> None:
        """An older norga wrote no checksum files at all; this one always has task 0's once task 1 exists."""
        if any(self.checkpoints.glob("*.pt.sha256")):
            return
        later = self.checkpoint_path(task + 1).is_file()
        metrics = self.read_metrics_file() or {}
        if later or int(metrics.get("completed_tasks") or 0) > task:
            raise RunError(f"{self.root}: checkpoints without checksum files (task_{task:02d}.pt.sha256 missing) "
                           "were written by an older norga version and cannot be verified; use a new --output-dir")

    def completed_tasks(self) -> int:
        """Number of leading tasks whose checkpoint is intact (0, 1, 2, ...)."""
        return self.scan().done

    def clean_temp_files(self) -> None:
        """Remove temp files left by a killed writer (call only while holding the lock)."""
        for folder in (self.root, self.checkpoints):
            if folder.is_dir():
                for tmp in folder.glob(".*.tmp"):
                    tmp.unlink(missing_ok=True)

    # ---- config, metrics, matrix -----------------------------------------
    def write_config(self, resolved: dict, note: Optional[str] = None) -> None:
        """config.yaml; ``note`` (e.g. that earlier tasks had another config) becomes a comment line on top."""
        header = f"# {note}\n" if note else ""
        self._write(self.root / "config.yaml", (header + yaml.safe_dump(resolved, sort_keys=False)).encode())

    def read_config(self) -> Optional[dict]:
        path = self.root / "config.yaml"
        if not path.is_file():
            return None
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise RunError(f"{path} is unreadable ({type(err).__name__}); restore it or use a new "
                           "--output-dir") from err
        if not isinstance(raw, dict):
            raise RunError(f"{path} is not a norga config (top level is not a mapping); use a new --output-dir")
        return raw

    def write_metrics(self, metrics: dict) -> None:
        """metrics.json, with the inputs its tasks' checkpoints record (:func:`~norga.engine.run_inputs.with_inputs`:
        backbone weights and data split); NaN/inf never reach it (RunError naming the first such key instead)."""
        from .run_inputs import with_inputs

        done = int(metrics.get("completed_tasks") or 0)
        metrics = with_inputs(metrics, [self._records.get(t, {}).get("inputs") for t in range(done)])
        try:
            text = json.dumps(metrics, indent=2, allow_nan=False)
        except ValueError:
            raise RunError(f"metrics for {self.root} hold NaN or inf at {non_finite_key(metrics)}; not written "
                           "(did training diverge? see log.txt)") from None
        self._write(self.root / "metrics.json", (text + "\n").encode())

    def read_metrics(self) -> Optional[dict]:
        """metrics.json after checking it against the evaluation rows its checkpoints record
        (:func:`norga.engine.run_truth.check_metrics`: RunError naming it and the fix when they disagree, or when a
        task it counts has no intact checkpoint); None when missing or unreadable (training rebuilds it)."""
        from .run_truth import check_metrics

        metrics = self.read_metrics_file()
        return None if metrics is None else check_metrics(self, metrics)

    def read_metrics_file(self) -> Optional[dict]:
        """metrics.json as it is on disk (not checked), or None when missing or unreadable."""
        try:
            data = json.loads((self.root / "metrics.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_matrix_csv(self, rows: List[List[Optional[float]]]) -> None:
        """Class-incremental accuracy S[i][t]: one row per evaluated task i, one column per task t learned."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["evaluated_task"] + [f"after_task_{t}" for t in range(len(rows))])
        for i, row in enumerate(rows):
            writer.writerow([i] + ["" if v is None else f"{v:.6f}" for v in row])
        self._write(self.root / "acc_matrix.csv", out.getvalue().encode())

    # ---- folder, lock, log ---------------------------------------------------
    def ensure_folder(self) -> bool:
        """Create the run folder if needed; True if it was created now. RunError if it is a file."""
        if self.root.exists() and not self.root.is_dir():
            raise RunError(f"output folder {self.root} exists and is not a folder; choose another --output-dir")
        try:
            existed = self.root.is_dir()
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise write_failure(self.root, err) from err
        return not existed

    def lock(self):
        """Exclusive lock on ``DIR/.lock`` (a context manager, see :mod:`norga.engine.folder_lock`)."""
        return RunLock(self.root / ".lock")

    def logger(self) -> logging.Logger:
        """Logger writing to log.txt (appending across resumes) and to stdout."""
        return run_logger(self.root)

