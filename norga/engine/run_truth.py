"""Checkpoints are the truth: ``metrics.json`` is checked against the evaluation rows its checkpoints record before
a run is reported, summarised or exported.

Each checkpoint ``task_XX.pt`` records its task's evaluation row (:func:`norga.engine.lifecycle.attach_evaluation`):
the accuracies of tasks 0..XX after learning task XX. :func:`expected_results` rebuilds from those rows what
``metrics.json`` derives from them (the accuracy matrices, FA/CA/FM/BWT, the official and task-incremental scores,
task-identity accuracies, the task counts); :func:`metrics_problem` names the first value that differs, a task
``metrics.json`` counts whose checkpoint is missing, corrupt or without its checksum, or a checkpoint it does not
count. Readers go through :meth:`~norga.engine.run_folder.RunDir.read_metrics` (:func:`check_metrics`: one
RunError naming ``metrics.json`` and the fix); ``norga train`` on a finished run rebuilds a disagreeing file from
the checkpoints instead (:func:`norga.engine.lifecycle.finished_metrics`). Every checkpoint is loaded (and so
hashed) at most once per RunDir (:meth:`~norga.engine.run_folder.RunDir.record`).
"""
from __future__ import annotations

import math
from typing import Any, Iterator, List, Optional, Tuple

from ..errors import RunError
from ..reports.metrics import empty_matrix, summarize

FIX = ("re-run the norga train command of this run on the folder (it rebuilds metrics.json from the checkpoints), or "
       "recompute the results with norga eval --run")
REQUIRED = ("FA", "CA", "FM", "acc_matrix", "completed_tasks", "num_tasks")  # compared even when absent


def expected_results(rows: List[dict], num_tasks: int) -> dict:
    """What metrics.json derives from the evaluation rows ``rows`` (checkpoint t's ``evaluation``) of tasks 0..t."""
    cil, til, tii, unmasked = (empty_matrix(num_tasks) for _ in range(4))
    for t, evaluation in enumerate(rows):
        for i, row in enumerate(evaluation["tasks"]):
            cil[i][t], til[i][t], tii[i][t] = row["cil_accuracy"], row["til_accuracy"], row.get("tii_accuracy")
            unmasked[i][t] = row.get("cil_unmasked_accuracy")
    done = len(rows)
    block = lambda matrix: [row[:done] for row in matrix[:done]]  # noqa: E731
    expected = {"acc_matrix": cil, "til_acc_matrix": til, "completed_tasks": done, "num_tasks": num_tasks,
                "official": {"acc_matrix": unmasked}}
    if done:
        official = summarize(block(unmasked))
        expected.update(summarize(block(cil)), til_FA=summarize(block(til))["FA"])
        expected["official"].update(FA=official["FA"], CA=official["CA"], FM=official["FM_official"])
        final = [tii[i][done - 1] for i in range(done)]
        expected.update(tii_accuracy=None if None in final else final, tii_acc_matrix=None if None in final else tii)
    return expected


def _leaves(value: Any, path: str) -> Iterator[Tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def first_difference(metrics: dict, expected: dict) -> Optional[str]:
    """'KEY: A in metrics.json, B from the checkpoints' for the first value that differs, or None (a key of
    :data:`REQUIRED` is compared even when metrics.json lacks it, the others only when it has them)."""
    for key, value in expected.items():
        if key not in metrics and key not in REQUIRED:
            continue
        wanted, found = dict(_leaves(value, key)), dict(_leaves(metrics.get(key), key))
        for path, want in wanted.items():
            if path not in found or not _same(found[path], want):
                return f"{path}: {found.get(path, 'missing')!r} in metrics.json, {want!r} from the checkpoints"
        extra = sorted(set(found) - set(wanted))
        if extra:
            return f"{extra[0]}: {found[extra[0]]!r} in metrics.json, not in the checkpoints"
    return None


def metrics_problem(run, metrics: dict) -> Optional[str]:
    """What is wrong with ``metrics`` (a run folder's metrics.json) given its checkpoints, or None (module doc).

    RunError when a checkpoint it counts cannot be verified (missing, corrupt, no checksum file)."""
    claimed = metrics.get("completed_tasks")
    if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed < 0:
        return f"records no valid completed_tasks ({claimed!r})"
    for task in range(claimed):
        if not run.checkpoint_path(task).is_file():
            return (f"counts {claimed} completed tasks but checkpoints/task_{task:02d}.pt is missing: results without "
                    "their checkpoint cannot be verified")
    rows = [run.record(task).get("evaluation") for task in range(claimed)]
    if any(not isinstance(row, dict) or not isinstance(row.get("tasks"), list) for row in rows):
        return "cannot be verified: its checkpoints carry no evaluation rows (written by an older norga)"
    if run.checkpoint_path(claimed).is_file():
        return (f"counts {claimed} completed tasks but checkpoints/task_{claimed:02d}.pt exists too (a run stopped "
                "between its checkpoint and metrics.json)")
    num_tasks = ((run.record(claimed - 1).get("config") or {}).get("data") or {}).get("num_tasks") if claimed else None
    expected = expected_results(rows, num_tasks if isinstance(num_tasks, int) else metrics.get("num_tasks") or claimed)
    difference = first_difference(metrics, expected)
    return f"disagrees with the evaluation rows its checkpoints record ({difference}): it was edited or copied in" \
        if difference else None


def check_metrics(run, metrics: dict) -> dict:
    """``metrics`` when they agree with the run's checkpoints; else one RunError naming metrics.json and the fix."""
    problem = metrics_problem(run, metrics)
    if problem:
        raise RunError(f"{run.root / 'metrics.json'} {problem}; {FIX}")
    return metrics
