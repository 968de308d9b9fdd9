"""Run the points of a sweep that are not done, through a launcher (:mod:`norga.sweep.launchers`).

    states = plan(points, root, totals)                 # RunState per point, from the run folders
    outcomes = run_points(points, root, totals, launcher="local", jobs=2)   # what is not done; resumable

A point is launched when it is ``missing`` or ``partial`` (its command resumes the run folder after its last
finished task), and when it is ``failed`` only with ``retry_failed``. Each command is ``norga train`` on the point
(:func:`norga.sweep.points.command_line`: ``torchrun`` with ``nproc`` > 1 or ``nodes`` > 1); its log and exit
record go to ``ROOT/logs/<point>/seed<S>/``. Torch-free.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .launchers import Outcome, launch
from .points import command_line
from .root import log_dir, log_name, record_path, states_of
from .status import RunState


def plan(points: Sequence, root: Path, totals: Dict[str, Optional[int]]) -> List[RunState]:
    """The state of every point, read from its run folder and exit record."""
    return states_of(points, root, totals)


def pending(points: Sequence, states: Sequence[RunState], retry_failed: bool = False) -> Tuple[List, List[str]]:
    """(points to launch, one line per point left out and why)."""
    chosen, skipped = [], []
    for point, state in zip(points, states):
        if state.kind == "done":
            skipped.append(f"{point.label}: done, skipped")
        elif state.kind == "failed" and not retry_failed:
            skipped.append(f"{point.label}: {state.text()}; not resubmitted (--retry-failed resubmits it)")
        else:
            chosen.append(point)
    return chosen, skipped


def run_points(points: Sequence, root: Path, totals: Dict[str, Optional[int]], launcher: str = "local",
               jobs: int = 1, nproc: int = 1, nodes: int = 1, feature_cache: Optional[Path] = None,
               retry_failed: bool = False, log: Callable[[str], None] = print, **options) -> List[Outcome]:
    """Launch every point not done (see the module docstring) and return the launcher's outcomes, in order;
    ``options`` go to :func:`norga.sweep.launchers.launch` (``gpus``, ``wait``, SLURM options)."""
    chosen, skipped = pending(points, plan(points, root, totals), retry_failed)
    for line in skipped:
        log(line)
    if not chosen:
        return []
    log(f"launching {len(chosen)} run(s) with --launcher {launcher}" + (f", {jobs} at a time" if jobs > 1 else "")
        + f"; logs in {log_dir(root)}")
    commands = [command_line(p, nproc, nodes, feature_cache) for p in chosen]
    if nodes > 1:
        options["nodes"] = nodes  # the SLURM job spans them; one torchrun per node
    return launch(commands, launcher, jobs, log_dir(root), names=[log_name(p.label) for p in chosen],
                  records=[record_path(root, p.label) for p in chosen], **options)
