"""A GPU check that fits one 8-minute call (docs/gpus.md, "The GPU check").

    python -m bench.gpu_check --prepare runs/gpu_check_data [--shared ../shared]   # on a CPU machine, once
    python -m bench.gpu_check --data runs/gpu_check_data --device cuda            # on the GPU machine
    python -m bench.gpu_check --device cpu --tiny                                 # the same code on a CPU, ~1 min

Steps, in order, each in its own worker process with its own time budget counted from the worker's start
(``bench.gpu_check_steps.BUDGETS``; a step that overruns is stopped and recorded as ``timeout`` with what it
measured so far; a step that cannot get half its budget before the check's total runs out is ``skipped`` with the
reason; a step that needs a missing optional package or compiler is ``skipped`` naming it): environment (versions,
optional packages, compilers; the only step whose failure, no CUDA device, stops the others), attention (fused
SDPA at the augmented prefix head dim), attention_profile (the backends the profiler sees), smoke (every registered
method's smoke config, fp32 and bf16), small_task (NoRGa on the prepared CIFAR-100 task, compared with the CPU
run), timing (prompted ViT-B/16 against plain timm, bf16, eager, peak memory), compile (the same passes compiled;
optional). After every step ``OUT/gpu_check.json`` and ``OUT/gpu_check.md`` are rewritten (a check killed from
outside leaves its verdict so far), and on CUDA ``OUT/gpu_rates.json``; run folders (checkpoints) live in a
scratch folder outside OUT, deleted at the end. Exit status 0 when every step passed, 1 otherwise, 2 for
unusable input.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from norga.errors import NorgaError

from . import gpu_check_prepare as prep
from .gpu_check_report import write_summary
from .gpu_check_steps import BUDGETS, REPORT_S, STEPS
from .gpu_check_worker import EVENTS

# seconds of the whole check from its start: the steps' budgets and the summaries (START_S of process start before
# it: 15 + 395 + 10 = 420 s on a GPU, docs/gpus.md's table) / --tiny (a bound)
TOTAL_BUDGET = {False: sum(b[0] for b in BUDGETS.values()) + REPORT_S, True: 420.0}
MIN_SHARE = 0.5  # a step starts only if at least this share of its budget is left in the check's total
OUT_LIMIT_MIB = 5  # what --out holds (summaries, rates, logs, metrics; no checkpoints)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n")[1])
    p.add_argument("--prepare", type=Path, metavar="DIR", help="write the data subset, weights and CPU reference "
                   "into DIR (git-ignored, e.g. runs/gpu_check_data) and stop")
    p.add_argument("--shared", type=Path, default=prep.REPO.parent / "shared", help="with --prepare: the folder "
                   "with data/cifar100.npz and weights/ (default ../shared)")
    p.add_argument("--data", type=Path, metavar="DIR", help="the folder --prepare wrote (needed unless --tiny)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:K or cpu")
    p.add_argument("--tiny", action="store_true", help="tiny ViT and data (made here without --data), CPU-sized")
    p.add_argument("--out", type=Path, default=None, help="output folder (default runs/gpu_check/<UTC time>)")
    p.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS), help="run only these steps")
    p.add_argument("--total-budget", type=float, default=None, metavar="S",
                   help=f"seconds for the whole check (default {TOTAL_BUDGET[False]:.0f}; "
                   f"{TOTAL_BUDGET[True]:.0f} with --tiny)")
    p.add_argument("--budget-scale", type=float, default=1.0, metavar="F",
                   help="multiply every step's budget and the total by F (> 0): a slower GPU, or a shared CPU")
    return p


class Watch:
    """Reads the worker's events file incrementally into per-step records."""

    def __init__(self, path: Path, records: Dict[str, dict]):
        self.path, self.records, self.offset, self.current = path, records, 0, None
        self.offset = path.stat().st_size if path.is_file() else 0

    def poll(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path) as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind("\n") + 1]  # a line being written waits for the next poll
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            self.take(json.loads(line))

    def take(self, event: dict) -> None:
        step, kind = event["step"], event["event"]
        record = self.records[step]
        if kind == "start":
            record.update(status="running", started=event["time"])
            self.current = step
        elif kind == "partial":
            record.setdefault("partials", {})[event["key"]] = event["value"]
        else:
            keys = ("status", "result", "error", "reason", "missing", "fatal", "seconds")
            record.update({k: event[k] for k in keys if k in event})
            self.current = None


class Terminated(Exception):
    """SIGTERM (e.g. the outer ``timeout``): stop the worker, write the summary, exit."""


def on_sigterm(signum, frame):
    raise Terminated()


def spawn(plan: dict, out: Path) -> subprocess.Popen:
    """A worker process over ``plan`` from the checkout (``PYTHONPATH``, no install), in its own process group."""
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(prep.REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "bench.gpu_check_worker", str(plan_path)], cwd=prep.REPO, env=env,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group (start_new_session)
        proc.wait()


def run_step(check: "Check", step: str) -> None:
    """``step`` in a new worker, stopped at its deadline (worker start-up included); its record is final after."""
    spawned = time.time()
    deadline = min(spawned + check.budgets[step], check.deadline)
    record = check.records[step]
    record.update(status="starting", spawned=spawned)
    proc = spawn({**check.plan, "steps": [step], "deadlines": {step: deadline}}, check.out)
    record["worker_pid"] = proc.pid
    watch = Watch(check.out / EVENTS, check.records)
    try:
        while proc.poll() is None and time.time() < deadline:
            watch.poll()
            time.sleep(0.2)
        exited = proc.poll() is not None
    finally:
        stop(proc)
        watch.poll()
    ran = round(time.time() - spawned, 1)
    record["wall_s"] = ran  # from the worker's start: what the budget counts
    if record["status"] in ("starting", "running") and exited:
        record.update(status="crashed", seconds=ran, reason=f"the worker exited with status {proc.returncode} "
                      f"{'inside' if record['status'] == 'running' else 'before'} this step (its output is above)")
    elif record["status"] in ("starting", "running"):
        where = "" if record["status"] == "running" else " before the step began (imports, CUDA context)"
        record.update(status="timeout", seconds=ran, reason=f"stopped after {ran} s{where} (budget "
                      f"{check.budgets[step]:.0f} s); its measurements so far are kept")
        print(f"[gpu_check] {step}: stopped at its budget ({check.budgets[step]:.0f} s)", flush=True)


class Check:
    """One run of the check: its clock, budgets, records and plan; writes the summary after every step."""

    def __init__(self, args, out: Path, data: Path, scratch: Path, started: float):
        self.args, self.out, self.data, self.started = args, out, data, started
        self.total = (args.total_budget or TOTAL_BUDGET[args.tiny]) * args.budget_scale
        self.deadline = started + self.total
        self.budgets = {s: float(BUDGETS[s][args.tiny]) * args.budget_scale for s in args.steps}
        self.records = {s: {"status": "pending", "budget_s": self.budgets[s]} for s in args.steps}
        self.plan = {"device": args.device, "tiny": args.tiny, "data": str(data), "out": str(out),
                     "scratch": str(scratch), "check_deadline": self.deadline}

    def blocked(self, step: str) -> Optional[str]:
        """Why ``step`` cannot start (no time left, or the device is missing), or None."""
        env = self.records.get("environment", {})
        if env.get("status") == "failed" and env.get("fatal"):
            return "the environment step found no usable device (see its error)"
        left = self.deadline - time.time()
        if left < MIN_SHARE * self.budgets[step]:
            return f"{max(left, 0):.0f} s of the check's {self.total:.0f} s were left"
        return None

    def run(self) -> None:
        for step in self.args.steps:
            reason = self.blocked(step)
            if reason:
                self.records[step].update(status="skipped", reason=reason)
            else:
                run_step(self, step)
            self.publish(final=False)

    def publish(self, final: bool) -> List[Path]:
        meta = {"device": self.args.device, "tiny": self.args.tiny, "data": str(self.data),
                "total_budget_s": self.total, "provisional": not final,
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started)),
                "wall_s": round(time.time() - self.started, 1), "argv": sys.argv[1:], "out_limit_mib": OUT_LIMIT_MIB,
                "out_mib": round(prep.folder_bytes(self.out) / 2 ** 20, 3)}
        meta["torch"] = (self.records.get("environment", {}).get("result") or {}).get("torch")
        return write_summary(self.out, meta, self.records)


def run_check(args, out: Path, data: Path, scratch: Path, started: float) -> int:
    check = Check(args, out, data, scratch, started)
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        check.run()
    except (Terminated, KeyboardInterrupt):
        for record in check.records.values():
            if record["status"] in ("starting", "running"):
                record.update(status="stopped", reason="the check was stopped from outside (SIGTERM / Ctrl-C) "
                              "during this step; its measurements so far are kept")
            elif record["status"] == "pending":
                record.update(status="skipped", reason="the check was stopped from outside (SIGTERM / Ctrl-C)")
    finally:
        signal.signal(signal.SIGTERM, previous)
    paths = check.publish(final=True)
    print((out / "gpu_check.md").read_text())
    print("-> " + ", ".join(str(p) for p in paths))
    return 0 if json.loads(paths[0].read_text())["passed"] else 1


def main(argv=None) -> int:
    started = time.time()
    p = parser()
    args = p.parse_args(argv)
    if args.budget_scale <= 0:
        p.error(f"--budget-scale must be > 0, got {args.budget_scale:g}")
    try:
        if args.prepare is not None:
            manifest = prep.prepare_from_shared(args.prepare, args.shared, "tiny" if args.tiny else "dinov2")
            print(f"prepared {args.prepare}:\n{prep.describe(manifest, args.prepare)}")
            return 0
        out = args.out or Path("runs") / "gpu_check" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        if (out / "gpu_check.json").exists():
            raise NorgaError(f"{out} already holds a GPU check; give another --out")
        out.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="gpu_check_scratch_"))  # run folders, checkpoints: not in --out
        try:
            data = args.data
            if data is None:
                if not args.tiny:
                    raise NorgaError("give --data DIR, the folder made by --prepare DIR on a machine with ../shared")
                data = prep.make_tiny_folder(scratch / "tiny_data")
            prep.verify(data)
            return run_check(args, out.resolve(), Path(data).resolve(), scratch, started)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except NorgaError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
