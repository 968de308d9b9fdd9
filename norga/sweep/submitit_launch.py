"""The launchers through submitit (``pip install norga[cluster]``): ``slurm`` (one SLURM job array per call) and
``submitit-local`` (submitit's ``LocalExecutor``: real subprocesses on the submission path SLURM uses, for one
machine and for the tests). Imported only when one of them is asked for; :func:`norga.sweep.launchers.require_submitit`
has set the preemption signal (SIGUSR1) before submitit is first imported.

Each job runs :class:`CommandJob`: the command as a child process, its output appended to the command's log. On the
preemption / time-limit signal (SIGUSR1; SLURM sends it ``signal_delay_s`` before the limit) or SIGTERM, submitit
calls :meth:`CommandJob.checkpoint`: the child gets SIGTERM (``norga train`` then stops, keeping the tasks it
finished), and the same job is requeued; the requeued job runs the command again, which resumes the run folder.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Sequence

import submitit
from submitit.helpers import Checkpointable

from .launch_base import PREEMPT_SIGNAL_ENV, LaunchError, Outcome, register_launcher
from .points import RDZV
from .records import prepare_log, write_exit_record


RDZV_PORT = 29500  # + the job id modulo 1000: the c10d rendezvous port on the job's first node
STOP_SECONDS = 60  # how long a stopped command may take to leave before it is killed
SIGNAL_DELAY_S = 90  # SLURM sends the preemption signal this long before the time limit (> STOP_SECONDS)


def _ignore_user_signals() -> None:  # in the child, before exec: SIG_IGN survives exec
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


class CommandJob(Checkpointable):
    """A submitit job running one command line (``command``: program arguments; ``log``: the file its output is
    appended to; ``record``: where its exit record goes, or None). Picklable: the running child is not kept."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._proc = None

    def __call__(self, command: Sequence[str], log: str, record: Optional[str] = None) -> int:
        env = submitit.JobEnvironment()
        port = RDZV_PORT + int("".join(c for c in str(env.job_id) if c.isdigit()) or 0) % 1000  # one per job
        argv = [part.replace(RDZV, f"{env.hostnames[0]}:{port}") for part in command]
        usr = getattr(signal, "SIG" + env.USR_SIG)
        signal.signal(signal.SIGTERM, signal.getsignal(usr))  # SIGTERM too: stop the command, then requeue
        with open(log, "ab") as out:  # guarded: the command's own log, under the sweep's log folder
            self._proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_ignore_user_signals)
            while self._proc.poll() is None:
                time.sleep(0.2)
        code = self._proc.returncode
        if record and env.global_rank == 0:
            write_exit_record(Path(record), code, Path(log))
        return code

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """Stop the command (SIGTERM, then SIGKILL after STOP_SECONDS) and requeue this job with its arguments."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.time() + STOP_SECONDS
            while time.time() < deadline and _alive(proc.pid):
                time.sleep(0.1)
            if _alive(proc.pid):
                proc.kill()
        return submitit.helpers.DelayedSubmission(CommandJob(), *args, **kwargs)


def _alive(pid: int) -> bool:
    """Whether the child ``pid`` still runs (reaped here when it has exited: a signal handler cannot use Popen's
    wait, whose lock the interrupted poll may hold)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0


def _submit(executor, commands, log_dir: Path, names, records) -> list:
    logs = [str(prepare_log(log_dir / f"{name}.log")) for name in names]
    recs = [str(r) if r else None for r in (records or [None] * len(commands))]
    return executor.map_array(CommandJob(), [list(c) for c in commands], logs, recs)


def _collect(jobs, commands, log_dir: Path, names, wait: bool) -> List[Outcome]:
    outcomes = []
    for job, command, name in zip(jobs, commands, names):
        code = None
        if wait:
            try:
                code = job.result()
            except Exception:  # noqa: BLE001 - a job that ended without a result (not requeued): its log says why
                code = -1
        outcomes.append(Outcome(tuple(command), code, log_dir / f"{name}.log", str(job.job_id)))
    return outcomes


@register_launcher("slurm")
def launch_slurm(commands, jobs: int, log_dir: Path, names, gpus, env, wait: bool = True, records=None,
                 partition: Optional[str] = None, gpus_per_job: int = 0, time_min: int = 60,
                 array_parallelism: Optional[int] = None, nodes: int = 1, cpus_per_job: Optional[int] = None,
                 mem_gb: Optional[float] = None, extra: Optional[dict] = None, job_name: str = "norga",
                 executor=None) -> List[Outcome]:
    """One SLURM job array: job i runs ``commands[i]`` on ``nodes`` node(s) (one task per node: a multi-node
    command is a ``torchrun`` whose rendezvous endpoint is the first node), ``gpus_per_job`` GPUs per node,
    ``time_min`` minutes, at most ``array_parallelism`` (default ``jobs``) at once; ``extra`` is passed to sbatch
    as it is. ``executor``: a submitit executor to use instead of a new ``SlurmExecutor`` (tests)."""
    if gpus:
        raise LaunchError("--gpus goes with --launcher local; on SLURM ask for --gpus-per-job")
    ex = executor or submitit.SlurmExecutor(folder=log_dir / "submitit")
    params = dict(job_name=job_name, time=int(time_min), nodes=int(nodes), ntasks_per_node=1,
                  array_parallelism=int(array_parallelism or jobs), signal_delay_s=SIGNAL_DELAY_S)
    params.update({k: v for k, v in dict(partition=partition, cpus_per_task=cpus_per_job,
                                         gpus_per_node=gpus_per_job or None,
                                         mem=f"{mem_gb}GB" if mem_gb else None).items() if v is not None})
    if extra:
        params["additional_parameters"] = dict(extra)
    # the job reads the preemption signal from its environment: the one this sbatch script asks SLURM to send
    env = {PREEMPT_SIGNAL_ENV: submitit.JobEnvironment.USR_SIG, **env}
    params["setup"] = [f"export {k}={_quote(v)}" for k, v in env.items()]
    try:
        ex.update_parameters(**params)
    except ValueError as err:
        raise LaunchError(f"--slurm: {' '.join(str(err).split())[:300]}") from None
    return _collect(_submit(ex, commands, log_dir, names, records), commands, log_dir, names, wait)


@register_launcher("submitit-local")
def launch_submitit_local(commands, jobs: int, log_dir: Path, names, gpus, env, wait: bool = True, records=None,
                          time_min: int = 24 * 60, **unused) -> List[Outcome]:
    """The commands as submitit ``LocalExecutor`` jobs, ``jobs`` at a time (a batch waits for the one before it)."""
    if unused:
        raise LaunchError(f"--launcher submitit-local takes no cluster option ({', '.join(sorted(unused))})")
    if not wait:
        raise LaunchError("--launcher submitit-local waits for its jobs; --no-wait goes with --launcher slurm")
    ex = submitit.LocalExecutor(folder=log_dir / "submitit")
    ex.update_parameters(timeout_min=time_min, signal_delay_s=30,
                         **({"setup": [f"export {k}={_quote(v)}" for k, v in env.items()]} if env else {}))
    outcomes: List[Outcome] = []
    for start in range(0, len(commands), jobs):
        part = slice(start, start + jobs)
        recs = list(records)[part] if records else None
        submitted = _submit(ex, commands[part], log_dir, names[part], recs)
        outcomes += _collect(submitted, commands[part], log_dir, names[part], True)
    return outcomes


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(str(value))
