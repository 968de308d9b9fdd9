"""The Optuna study of a tune folder: storage, sampler, pruner, the budget, and the workers' optimize loop.

* storage: Optuna's RDB storage, by default the SQLite file ``TUNE/study.db``, else any SQLAlchemy URL
  (``--storage postgresql://...``) so workers on several machines share one study. Optuna's heartbeat is on
  (:data:`HEARTBEAT_SECONDS`): a worker that dies leaves its running trial stale, and the next worker to start a
  trial marks it FAIL (``fail_stale_trials``); a dead worker on this host is found at once by its pid
  (:func:`fail_dead_local_trials`). A failed trial is never counted: the budget counts finished trials
  (COMPLETE or PRUNED) only, so a killed trial is replaced, never counted twice;
* sampler: TPE, seeded (worker k uses ``sampler.seed + k``); pruner: the spec's (median by default);
* the study carries the spec's fingerprint: running another spec against the same storage is refused.

Optuna is imported only inside functions (``pip install norga[tune]``).
"""
from __future__ import annotations

import datetime
import os
import socket
import time
import warnings
from typing import Optional

from ..config import ConfigError
from ..errors import NorgaError
from .spec import PRUNERS, TuneSpec
from .trial import WORKER_ATTR

HEARTBEAT_SECONDS, GRACE_SECONDS = 20, 60  # a trial without a heartbeat for GRACE_SECONDS is stale
FINISHED = ("COMPLETE", "PRUNED")
ORPHAN_SECONDS = 30  # a RUNNING trial without its worker's name for longer than this lost its worker at birth


def optuna_module():
    """optuna, or one line naming the extra that installs it."""
    try:
        import optuna
    except ImportError as err:
        raise NorgaError("norga tune needs Optuna, which is not installed: pip install 'norga[tune]'") from err
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # norga prints its own lines
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeat, plots: stable here
    return optuna


def sqlite_url(path) -> str:
    return f"sqlite:///{os.path.abspath(path)}"


def open_storage(url: str):
    """Optuna's RDB storage at ``url`` with the heartbeat on (one line if the URL cannot be opened)."""
    optuna = optuna_module()
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                                          grace_period=GRACE_SECONDS)
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's errors: a wrong URL, a missing driver, no server
        raise NorgaError(f"--storage {url}: cannot open it ({type(err).__name__}: {str(err).splitlines()[0]}); give "
                         "a SQLAlchemy URL (sqlite:///FILE, postgresql://USER@HOST/DB) whose driver is installed"
                         ) from err


def make_pruner(spec: TuneSpec):
    optuna = optuna_module()
    options = {k: v for k, v in spec.pruner.items() if k != "name"}
    try:
        return getattr(optuna.pruners, PRUNERS[spec.pruner["name"]])(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{spec.path}: pruner {spec.pruner['name']}: {err}") from err


def open_study(spec: TuneSpec, storage, worker_index: int = 0, label: str = ""):
    """The study ``spec.study_name`` in ``storage``, created on first use; refused if it holds another spec."""
    optuna = optuna_module()
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed + worker_index)
    study = optuna.create_study(storage=storage, study_name=spec.study_name, direction=spec.direction,
                                sampler=sampler, pruner=make_pruner(spec), load_if_exists=True)
    recorded = study.user_attrs.get("norga_spec")
    if recorded is None:
        study.set_user_attr("norga_spec", spec.fingerprint())
        study.set_user_attr("norga_protocol", spec.protocol_name + (f" ({label})" if label else ""))
        study.set_user_attr("norga_metric", spec.metric)
    elif recorded != spec.fingerprint():
        raise NorgaError(f"the study {spec.study_name!r} in this storage was started with another spec (its config, "
                         "set, space, protocol, objective or tuning seeds differ); use another --out, --storage or "
                         "study_name, or restore the spec it was started with")
    return study


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_dead_local_trials(study) -> list:
    """Mark FAIL the RUNNING trials whose worker ran on this host and is gone, and those that never got a worker
    (a worker records itself as the trial's first act; none after :data:`ORPHAN_SECONDS`: it died starting the
    trial); their numbers."""
    optuna = optuna_module()
    host, failed, now = socket.gethostname(), [], datetime.datetime.now()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker = str(trial.user_attrs.get(WORKER_ATTR, ""))
        name, _, pid = worker.rpartition(":")
        dead = name == host and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid))
        orphan = not worker and trial.datetime_start is not None and (
            now - trial.datetime_start).total_seconds() > ORPHAN_SECONDS
        if dead or orphan:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            failed.append(trial.number)
    return failed


def finished_trials(study) -> int:
    optuna = optuna_module()
    states = tuple(getattr(optuna.trial.TrialState, s) for s in FINISHED)
    return len(study.get_trials(deepcopy=False, states=states))


def run_worker(study, objective, spec: TuneSpec, deadline: Optional[float] = None) -> None:
    """This process's optimize loop until the study has ``budget.trials`` finished trials, the wall time is spent
    (``deadline``, a ``time.time()``), or it is interrupted. Errors of a trial other than pruning fail the
    trial and stop the loop (Optuna's behaviour: the error goes on to the caller)."""
    optuna = optuna_module()
    fail_dead_local_trials(study)
    optuna.storages.fail_stale_trials(study)
    states = tuple(getattr(optuna.trial.TrialState, s) for s in FINISHED)
    callbacks = [optuna.study.MaxTrialsCallback(spec.trials, states=states)] if spec.trials else []
    if spec.trials and finished_trials(study) >= spec.trials:
        return
    timeout = None if deadline is None else max(deadline - time.time(), 0.0)
    if timeout == 0.0:
        return
    study.optimize(objective, timeout=timeout, callbacks=callbacks, gc_after_trial=True)
