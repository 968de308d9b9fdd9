"""Checkpoints and their run belong together: every checkpoint records the run id and config hash it was trained
under, and resume / eval check them before anything is written.

A checkpoint ``checkpoints/task_XX.pt`` carries ``run: {"run_id", "config_hash"}`` (:func:`identity`), next to
its ``task`` and the resolved ``config`` that trained it. :func:`verified_configs` loads the intact checkpoints
0..done-1 and refuses, naming the file, one that

* holds another task than its name says (renamed or copied out of order);
* belongs to another run (its run id is not the folder's, from ``norga-run.json``; in an unmarked folder of an
  older norga: not task 0's);
* carries no run identity in a run that has one (checkpoints of an older norga are accepted only as the tasks a
  run adopted when it got its marker, ``adopted_tasks``);
* records a config hash that is not its own config's.

:func:`check_config_file`: ``config.yaml`` must agree with the config its checkpoints were trained with (it is a
copy for the reader; the checkpoints are the record): an edited or copied-in file is an error listing the keys.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import RunError
from .provenance import affects_results, changed_values, config_hash, with_new_defaults
from .run_folder import RunDir
from .run_marker import RunMarker, new_marker, read_marker, require_run_folder, write_marker


def identity(run_id: str, resolved: dict) -> Dict[str, str]:
    """What a checkpoint records about its run: the run's id and the hash of the config that trained the task."""
    return {"run_id": run_id, "config_hash": config_hash(resolved)}


def _fix(task: int) -> str:
    return (f"put back this run's own task_{task:02d}.pt, or move it and the later checkpoints out of the folder to "
            f"train again from task {task}, or use a new --output-dir")


def check_identity(run: RunDir, task: int, saved: dict, run_id: Optional[str], adopted: int) -> Optional[str]:
    """RunError unless checkpoint ``task`` (``saved``) belongs to the run ``run_id``; returns its run id.

    ``run_id`` None: the folder has no marker, any id is accepted here (the caller compares them)."""
    name = f"{run.root}: checkpoints/task_{task:02d}.pt"
    if saved.get("task") != task:
        raise RunError(f"{name} holds task {saved.get('task')}, not task {task}: it was renamed or copied out of "
                       f"order; {_fix(task)}")
    record = saved.get("run")
    if record is None:
        if run_id is not None and task >= adopted:
            raise RunError(f"{name} (task {task}) carries no run id: it was written by an older norga for another "
                           f"run and copied in; {_fix(task)}")
        return None
    if not isinstance(record, dict) or record.get("config_hash") != config_hash(saved.get("config") or {}):
        raise RunError(f"{name} (task {task}) records a config hash that is not its own config's: the file was "
                       f"modified; {_fix(task)}")
    if run_id is not None and record.get("run_id") != run_id:
        raise RunError(f"{name} (task {task}) belongs to another run (run id {str(record.get('run_id'))[:8]}, this "
                       f"folder's run is {run_id[:8]}): it was copied in from another run folder; {_fix(task)}")
    return record.get("run_id")


def verified_configs(run: RunDir, done: int, marker: Optional[RunMarker] = None) -> List[Optional[dict]]:
    """The stored config of each intact checkpoint 0..done-1, after checking each belongs to this run (module doc).

    ``marker``: the folder's ``norga-run.json`` (read here when None). Loads each checkpoint once; writes nothing."""
    marker = marker or read_marker(run.root)
    expected, adopted = (marker.run_id, marker.adopted_tasks) if marker else (None, 0)
    configs: List[Optional[dict]] = []
    first_id = None
    for task in range(done):
        saved = run.load_checkpoint(task)
        found = check_identity(run, task, saved, expected, adopted)
        if marker is None:  # unmarked folder: every checkpoint must have task 0's run id (None: an older norga)
            if task == 0:
                first_id = found
            elif found != first_id:
                raise RunError(f"{run.root}: checkpoints/task_{task:02d}.pt (task {task}) belongs to another run than "
                               f"task_00.pt (run id {str(found)[:8]} vs {str(first_id)[:8]}): it was copied in; "
                               f"{_fix(task)}")
        configs.append(saved.get("config"))
    return configs


def checkpoints_run_id(run: RunDir) -> Optional[str]:
    """The run id task 0's checkpoint records (None: none, or an older norga's), for the marker of an unmarked run."""
    if not run.checkpoint_path(0).is_file():
        return None
    record = run.load_checkpoint(0).get("run")
    return record.get("run_id") if isinstance(record, dict) else None


def config_file_changes(run: RunDir, trained: dict) -> List[str]:
    """Keys (that change results) in which ``config.yaml`` differs from ``trained``; [] when it agrees or is gone."""
    on_disk = run.read_config()
    if on_disk is None:
        return []
    changes = changed_values(with_new_defaults(on_disk), with_new_defaults(trained))
    return sorted(k for k in changes if affects_results(k))


def check_config_file(run: RunDir, trained: dict, fix: str) -> None:
    """RunError listing the keys in which ``config.yaml`` disagrees with the config of the last checkpoint."""
    differing = config_file_changes(run, trained)
    if differing:
        raise RunError(f"{run.root / 'config.yaml'} disagrees with the config its checkpoints were trained with "
                       f"(differing: {differing[:12]}{' ...' if len(differing) > 12 else ''}): it was edited or "
                       f"copied in; {fix}")


def check_same_method(run: RunDir, previous: Optional[dict], method: str, task: int) -> None:
    """RunError when the last checkpoint (task ``task``, config ``previous``) was trained by another method than
    ``method``: even ``--force`` cannot continue another method's run (refused before anything is written)."""
    trained = ((previous or {}).get("method") or {}).get("name", method)
    if trained != method:
        raise RunError(f"{run.root}: checkpoint of task {task} was written by {trained}, not by method {method!r}; use "
                       "a new --output-dir")


def claim_folder(run: RunDir, resolved: dict, done: int, inputs: Optional[dict] = None) -> Dict[str, dict]:
    """Write the folder's marker (the first file of a new run; an unmarked run of an older norga gets one, taking
    over its ``done`` checkpoints), or update its config hash after ``--force``; returns what new checkpoints
    record: ``run`` (:func:`identity`) and ``inputs`` (:mod:`norga.engine.run_inputs`). Call once model and data
    are built, before anything else is written."""
    marker = read_marker(run.root)
    digest = config_hash(resolved)
    if marker is None:
        run_id = checkpoints_run_id(run) if done else None
        marker = new_marker(digest, run_id, adopted_tasks=done if done and run_id is None else 0)
        write_marker(run.root, marker)
    elif marker.config_hash != digest:
        marker.config_hash = digest
        write_marker(run.root, marker)
    return {"run": identity(marker.run_id, resolved), "inputs": inputs or {}}


def trained_config(run_dir: Path) -> Tuple[RunDir, int, dict]:
    """(run, intact tasks, the config its last intact checkpoint was trained with) of a run folder, after checking
    the folder is a norga run, its checkpoints belong to it and config.yaml agrees with them. Writes nothing."""
    run = RunDir(run_dir)
    require_run_folder(run.root)
    state = run.scan()
    if state.corrupt:  # a corrupt checkpoint, or one without its checksum file
        raise RunError(f"{run.root}: {state.corrupt}; 'norga train' on this folder trains that task again")
    if state.done == 0:
        raise RunError(f"{run_dir} has no completed task checkpoint yet")
    trained = verified_configs(run, state.done)[-1]
    if trained is None:
        raise RunError(f"{run_dir}: its checkpoints carry no config (written by an older norga); use a new run")
    check_config_file(run, trained, "restore it (or move it away: norga train writes the checkpoints' config again); "
                      "to evaluate on other data ask for it with --set KEY=VALUE (norga eval --help)")
    return run, state.done, trained
