"""``norga tune SPEC``: read and check the spec, claim the tune folder, open the study, run the workers, write the
reports and the final evaluation. Running it again continues the same study (its storage holds every trial).

Several workers (``-j N``): every worker runs the optimize loop against the shared storage (Optuna's distributed
pattern). :func:`start_workers` starts ``N`` processes ``python -m norga tune SPEC --worker K`` through the sweep
launchers (:func:`norga.sweep.launchers.launch`: ``local`` here, ``slurm`` / ``submitit-local`` through submitit)
and waits for them; then this process writes the reports. ``--worker K`` alone is one worker (start one on each
machine against a shared ``--storage`` URL).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import NorgaError
from .final import run_final
from .folder import check_database, claim_folder
from .protocols import checked_protocol
from .report import labelled, write_reports
from .spec import TuneSpec, read_spec
from .study import open_storage, open_study, optuna_module, run_worker, sqlite_url
from .trial import TrialRunner


@dataclass
class TuneRequest:
    """What the command line asks: the spec, the folder (None: the spec's ``output`` or ``tunes/<study>``), the
    storage URL (None: the folder's SQLite file), ``oracle`` allowed, this process's ``worker`` index (None: the
    coordinator), how many workers and through which launcher, whether to run the final evaluation."""

    spec: Path
    out: Optional[Path] = None
    storage: Optional[str] = None
    oracle: bool = False
    worker: Optional[int] = None
    jobs: int = 1
    launcher: str = "local"
    final: bool = True
    launcher_options: Dict[str, Any] = field(default_factory=dict)


def tune_folder(request: TuneRequest, spec: TuneSpec) -> Path:
    return Path(request.out or spec.output or Path("tunes") / spec.study_name)


def run_tune(request: TuneRequest, log=print) -> Dict[str, Any]:
    """The whole command; returns the summary (``best``, ``value``, ``final`` ...)."""
    start = time.time()
    spec = read_spec(request.spec)
    protocol = checked_protocol(spec, request.oracle)
    optuna_module()  # one line naming the extra, before anything is written
    root = claim_folder(tune_folder(request, spec), spec, protocol.label)
    url = request.storage or sqlite_url(check_database(root))
    study = open_study(spec, open_storage(url), request.worker or 0, protocol.label)
    deadline = start + 60 * spec.minutes if spec.minutes else None
    if request.worker is not None or request.jobs == 1:
        runner = TrialRunner(spec, protocol, root / "trials", protocol.stop_after_tasks(spec))
        run_worker(study, runner, spec, deadline)
    else:
        start_workers(request, root, url)
    if request.worker is not None:
        return {"worker": request.worker}
    summary = write_reports(root, study, spec, protocol.label)
    for note in summary["notes"]:
        log(f"note: {note}")
    if summary["best"] is None:
        log(f"no trial of study {spec.study_name} completed yet; run the same command again to continue")
        return summary
    log(f"best trial {summary['number']}: {spec.metric} {summary['value']:.4f} with {summary['best']} -> "
        f"{root / labelled('best.yaml', protocol.label)}")
    if request.final and _budget_spent(study, spec, deadline):
        summary["final"] = run_final(root, spec, summary["best"], protocol.label, log, jobs=request.jobs,
                                     launcher=request.launcher, env=worker_threads(request),
                                     launcher_options=request.launcher_options)
        log(f"final evaluation -> {root / labelled('final.md', protocol.label)}")
    return summary


def _budget_spent(study, spec: TuneSpec, deadline: Optional[float]) -> bool:
    """Whether the study is over: its trials done or its wall time spent (the final evaluation runs only then)."""
    from .study import finished_trials

    return (spec.trials is not None and finished_trials(study) >= spec.trials) or (
        deadline is not None and time.time() >= deadline)


def worker_command(request: TuneRequest, root: Path, url: str, index: int) -> List[str]:
    """The command line of worker ``index``: this Python, ``-m norga tune SPEC --worker index`` on the same folder
    and storage."""
    command = [sys.executable, "-m", "norga", "tune", str(request.spec), "--out", str(root), "--storage", url,
               "--worker", str(index)]
    return command + (["--oracle"] if request.oracle else [])


def worker_threads(request: TuneRequest) -> Dict[str, str]:
    """``OMP_NUM_THREADS`` for local workers: this machine's cores shared among them (unless already set), so N
    workers do not oversubscribe the cores (each torch would otherwise take them all)."""
    if request.launcher != "local" or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // request.jobs))}


def start_workers(request: TuneRequest, root: Path, url: str) -> None:
    """Start ``request.jobs`` workers through the sweep launcher ``request.launcher`` and wait for them; one line
    naming the logs of the workers that failed. Their logs: ``TUNE/workers/worker_K.log``."""
    from ..sweep.launchers import launch

    commands = [worker_command(request, root, url, k) for k in range(request.jobs)]
    outcomes = launch(commands, launcher=request.launcher, jobs=request.jobs, log_dir=root / "workers",
                      names=[f"worker_{k}" for k in range(request.jobs)], env=worker_threads(request),
                      **request.launcher_options)
    failed = [f"{o.log} (exit {o.returncode})" for o in outcomes if o.returncode not in (0, None)]
    if failed:
        raise NorgaError(f"{len(failed)} of {request.jobs} tuning workers failed: see {', '.join(failed)}; run the "
                         "same command again to continue the study")
