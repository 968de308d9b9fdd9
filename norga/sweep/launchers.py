"""Start command lines as jobs: on this machine (``local``), through SLURM (``slurm``) or through submitit's
``LocalExecutor`` (``submitit-local``: real subprocesses on the submission path SLURM uses), registered by name.

    outcomes = launch([["norga", "train", "--config", "smoke", "--output-dir", "runs/a"], ...],
                      launcher="local", jobs=2, log_dir=Path("runs/sweep/logs"), gpus=["0", "1"])
    [o.returncode for o in outcomes]        # exit status of each command, in order (None: not waited for)

``local`` needs only the standard library: at most ``jobs`` commands run at once, each with its output in
``log_dir/<name>.log``; with ``gpus`` each running command gets one of them as ``CUDA_VISIBLE_DEVICES``. The
submitit launchers (:mod:`norga.sweep.submitit_launch`, ``pip install norga[cluster]``) submit one job array and,
by default, wait for it; a job stopped by SIGUSR1 (time limit) or SIGTERM (preemption) stops its command (which
leaves its run folder at the last finished task) and requeues itself
(:class:`norga.sweep.submitit_launch.CommandJob`).
Torch-free.
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from ..interrupts import sigterm_as_interrupt
from ..outputs import make_output_folder
from .launch_base import (LAUNCHERS, PREEMPT_SIGNAL_ENV, SUBMITIT_LAUNCHERS, LaunchError, Outcome,  # noqa: F401
                          register_launcher)
from .records import prepare_log, write_exit_record


def launch(commands: Sequence[Sequence[str]], launcher: str = "local", jobs: int = 1,
           log_dir: Path = Path("logs"), *, names: Optional[Sequence[str]] = None,
           gpus: Sequence[str] = (), env: Optional[Mapping[str, str]] = None, wait: bool = True,
           records: Optional[Sequence[Path]] = None, **slurm_options) -> List[Outcome]:
    """Run ``commands`` (each a list of program arguments) through the launcher named ``launcher``; one
    :class:`Outcome` per command, in order.

    ``jobs``: how many run at once (``local``, ``submitit-local``; SLURM: the array's parallelism unless
    ``array_parallelism`` is given). ``log_dir``: where logs (and submitit's job files) go, created through the write
    guard. ``names``: a label per command, its log is ``log_dir/<name>.log`` (``/`` makes folders; default ``job000``,
    ``job001``, ...). ``gpus``: ``CUDA_VISIBLE_DEVICES`` values handed out one per running command (``local``).
    ``env``: variables added to every command's environment. ``wait``: wait for the commands (False: submit and
    return, returncode None).
    ``records``: per command, a JSON file its exit status is written to when it ends (:mod:`norga.sweep.records`).
    ``slurm_options`` (``slurm``, ``submitit-local``): ``partition``, ``gpus_per_job``, ``time_min``,
    ``array_parallelism``, ``nodes``, ``cpus_per_job``, ``mem_gb``, ``extra`` ({sbatch key: value}, passed through).
    Raises :class:`LaunchError` (one line naming the fix) for an unknown launcher or missing submitit.
    """
    check_launcher(launcher)
    if jobs < 1:
        raise LaunchError(f"-j/--jobs: expected a number of concurrent jobs >= 1, got {jobs}")
    labels = list(names) if names is not None else [f"job{i:03d}" for i in range(len(commands))]
    if len(labels) != len(commands) or len(set(labels)) != len(labels):
        raise LaunchError("launch: names must be one distinct label per command")
    if not commands:
        return []
    if records is not None and len(records) != len(commands):
        raise LaunchError("launch: records must be one path per command")
    make_output_folder(Path(log_dir), "--out")
    return LAUNCHERS[launcher]([tuple(c) for c in commands], jobs=jobs, log_dir=Path(log_dir), names=labels,
                               gpus=list(gpus), env=dict(env or {}), wait=wait, records=records, **slurm_options)


def check_launcher(launcher: str) -> None:
    """LaunchError unless ``launcher`` names a launcher that can run here (a submitit one: submitit installed, and
    then registered)."""
    if launcher not in LAUNCHERS and launcher in SUBMITIT_LAUNCHERS:
        require_submitit(launcher)
        from . import submitit_launch  # noqa: F401 - registers the submitit launchers
    if launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher: unknown launcher {launcher!r}; choose one of "
                          f"{', '.join(sorted({*LAUNCHERS, *SUBMITIT_LAUNCHERS}))}")
    missing = [tool for tool in ("sbatch", "srun") if launcher == "slurm" and shutil.which(tool) is None]
    if missing:
        raise LaunchError(f"--launcher slurm: {' and '.join(missing)} not found on PATH: this machine is no SLURM "
                          "login node; run the same command on one, or use --launcher local")


def require_submitit(launcher: str = "slurm"):
    """The submitit module, imported with SIGUSR1 as its preemption signal unless ``SUBMITIT_PREEMPT_SIGNAL`` says
    otherwise (set before its first import; the jobs inherit it); one line naming ``pip install norga[cluster]``
    when it is not installed."""
    os.environ.setdefault(PREEMPT_SIGNAL_ENV, "USR1")
    try:
        import submitit
    except ImportError:
        raise LaunchError(f"--launcher {launcher} needs submitit, which is not installed; pip install "
                          "'norga[cluster]' (or pip install submitit), or use --launcher local") from None
    os.environ[PREEMPT_SIGNAL_ENV] = submitit.JobEnvironment.USR_SIG  # the jobs use the signal sbatch names
    return submitit


# ---- local: N concurrent processes, the standard library only ------------------------------------------------
@register_launcher("local")
def launch_local(commands, jobs: int, log_dir: Path, names, gpus, env, wait: bool = True, records=None,
                 **unused) -> List[Outcome]:
    """At most ``jobs`` of ``commands`` at once on this machine, each logging to ``log_dir/<name>.log``. Ctrl-C or
    SIGTERM stops the running commands with SIGTERM (each leaves its run folder at its last finished task)."""
    if unused:
        raise LaunchError(f"--launcher local takes no cluster option ({', '.join(sorted(unused))}); use "
                          "--launcher slurm")
    if not wait:
        raise LaunchError("--launcher local waits for its commands; --no-wait goes with --launcher slurm")
    devices: "queue.Queue[Optional[str]]" = queue.Queue()
    for gpu in gpus or [None] * jobs:
        devices.put(gpu)
    running: Dict[int, subprocess.Popen] = {}
    lock, stopping = threading.Lock(), threading.Event()

    def run_one(index: int) -> Outcome:
        log = prepare_log(log_dir / f"{names[index]}.log")
        device = devices.get()
        try:
            child_env = {**os.environ, **env}
            if device is not None:
                child_env["CUDA_VISIBLE_DEVICES"] = device
            with open(log, "ab") as out:  # guarded: the command's own log, streamed; its path checked just above
                with lock:
                    if stopping.is_set():  # interrupted while this one waited for its turn: not started
                        return Outcome(commands[index], None, log)
                    proc = subprocess.Popen(commands[index], stdout=out, stderr=subprocess.STDOUT, env=child_env)
                    running[index] = proc
                code = proc.wait()
                with lock:
                    running.pop(index, None)
            if records is not None:
                write_exit_record(Path(records[index]), code, log)
            return Outcome(commands[index], code, log)
        finally:
            devices.put(device)

    pool = ThreadPoolExecutor(max_workers=min(jobs, len(gpus) if gpus else jobs))
    try:
        with sigterm_as_interrupt():  # whoever called: a norga command or a user's script
            futures = [pool.submit(run_one, i) for i in range(len(commands))]
            return [f.result() for f in futures]
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        with lock:
            stopping.set()
            for proc in running.values():
                proc.send_signal(signal.SIGTERM)
        for proc in list(running.values()):
            proc.wait()
        raise
    finally:
        pool.shutdown(wait=True)
