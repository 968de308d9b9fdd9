"""A GPU check that fits one 8-minute call (docs/gpus.md, "The GPU check").

    python -m bench.gpu_check --prepare runs/gpu_check_data [--shared ../shared]   # on a CPU machine, once
    python -m bench.gpu_check --data runs/gpu_check_data --device cuda            # on the GPU machine
    python -m bench.gpu_check --device cpu --tiny                                 # the same code on a CPU, ~1 min

Steps, in order, each in a worker process with its own time budget (``bench.gpu_check_steps.BUDGETS``; a step
that overruns is stopped and recorded as ``timeout`` with what it measured so far, the next one starts in a new
worker; a step that cannot get its budget before the check's total runs out is ``skipped`` with the reason):
environment, attention (fused SDPA at the augmented prefix head dim), smoke (every registered method's smoke
config, fp32 and bf16), small_task (NoRGa on the prepared CIFAR-100 task, compared with the CPU run), timing
(prompted ViT-B/16 against plain timm, bf16, eager and compiled, peak memory). Writes ``OUT/gpu_check.json``,
``OUT/gpu_check.md`` and, on CUDA, ``OUT/gpu_rates.json``. Exit status 0 when every step passed, 1 otherwise,
2 for unusable input.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from norga.errors import NorgaError

from . import gpu_check_prepare as prep
from .gpu_check_report import write_summary
from .gpu_check_steps import BUDGETS, STEPS
from .gpu_check_worker import EVENTS

# seconds of the whole check from its start (the 8-minute call less ~15 s of interpreter start and imports before
# it) / --tiny (a bound)
TOTAL_BUDGET = {False: 465.0, True: 360.0}
START_UP_S = 15.0  # a worker's imports and CUDA context before its first step (counted against the total)
MIN_SHARE = 0.5  # a step starts only if at least this share of its budget is left in the check's total


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
                   help="seconds for the whole check (default 465; 360 with --tiny)")
    p.add_argument("--budget-scale", type=float, default=1.0, metavar="F",
                   help="multiply every step's budget and the total by F (> 0): a slower GPU, or a shared CPU")
    return p


class Watch:
    """Reads the worker's events file incrementally into per-step records."""

    def __init__(self, path: Path, records: Dict[str, dict]):
        self.path, self.records, self.offset, self.current = path, records, 0, None

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
        record = self.records.setdefault(step, {"status": "running", "partials": {}})
        if kind == "start":
            record["started"], self.current = event["time"], step
        elif kind == "partial":
            record["partials"][event["key"]] = event["value"]
        else:
            record.update({k: event[k] for k in ("status", "result", "error", "seconds") if k in event})
            self.current = None


def run_worker(plan: dict, out: Path, records: Dict[str, dict], budgets: Dict[str, float], deadline: float) -> int:
    """One worker over ``plan``'s steps until it exits, or until its current step overruns (then it is killed);
    the worker's exit status."""
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(prep.REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "bench.gpu_check_worker", str(plan_path)], cwd=prep.REPO, env=env,
                            start_new_session=True)
    watch = Watch(out / EVENTS, records)
    watch.offset = (out / EVENTS).stat().st_size if (out / EVENTS).is_file() else 0
    while True:
        watch.poll()
        if proc.poll() is not None:
            watch.poll()
            if watch.current is not None:  # died inside a step (a crash, not an exception)
                records[watch.current].update(status="crashed", reason=f"the worker exited with status "
                                              f"{proc.returncode} inside this step (its output is above)")
            return proc.returncode
        step = watch.current
        if step is not None and time.time() > min(records[step]["started"] + budgets[step], deadline):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group (start_new_session)
            proc.wait()
            watch.poll()
            ran = round(time.time() - records[step]["started"], 1)
            records[step].update(status="timeout", seconds=ran, reason=f"stopped after {ran} s (budget "
                                 f"{budgets[step]:.0f} s); its measurements so far are kept")
            print(f"[gpu_check] {step}: stopped at its budget ({budgets[step]:.0f} s)", flush=True)
            return proc.returncode
        time.sleep(0.2)


def run_check(args, out: Path, data: Optional[Path]) -> int:
    started = time.time()
    total = (args.total_budget or TOTAL_BUDGET[args.tiny]) * args.budget_scale
    deadline = started + total
    budgets = {s: float(BUDGETS[s][args.tiny]) * args.budget_scale for s in args.steps}
    records: Dict[str, dict] = {}
    pending: List[str] = list(args.steps)
    while pending:
        left = deadline - time.time() - START_UP_S
        for step in [s for s in pending if left < MIN_SHARE * budgets[s]]:
            records[step] = {"status": "skipped", "budget_s": budgets[step],
                             "reason": f"{max(left, 0):.0f} s of the check's {total:.0f} s were left"}
        pending = [s for s in pending if s not in records]
        if not pending:
            break
        plan = {"steps": pending, "device": args.device, "tiny": args.tiny, "data": str(data) if data else None,
                "out": str(out), "budgets": budgets, "check_deadline": deadline}
        status = run_worker(plan, out, records, budgets, deadline)
        if not any(s in records for s in pending):  # the worker died before its first step (e.g. an import)
            records[pending[0]] = {"status": "crashed", "reason": f"the worker exited with status {status} before "
                                   "this step started (its output is above)"}
        for step in pending:
            if step in records:
                records[step]["budget_s"] = budgets[step]
        if records.get("environment", {}).get("status", "ok") != "ok":
            for step in pending:
                records.setdefault(step, {"status": "skipped", "budget_s": budgets[step],
                                          "reason": "the environment step failed (see its error)"})
        pending = [s for s in pending if s not in records]
    records = {s: records[s] for s in args.steps}
    meta = {"device": args.device, "tiny": args.tiny, "data": str(data), "total_budget_s": total,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
            "wall_s": round(time.time() - started, 1), "argv": sys.argv[1:]}
    meta["torch"] = (records.get("environment", {}).get("result") or {}).get("torch")
    paths = write_summary(out, meta, records)
    print((out / "gpu_check.md").read_text())
    print("-> " + ", ".join(str(p) for p in paths))
    return 0 if json.loads(paths[0].read_text())["passed"] else 1


def main(argv=None) -> int:
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
        data = args.data
        if data is None:
            if not args.tiny:
                raise NorgaError("give --data DIR, the folder made by --prepare DIR on a machine with ../shared")
            data = prep.make_tiny_folder(out / "tiny_data")
        prep.verify(data)
        return run_check(args, out.resolve(), Path(data).resolve())
    except NorgaError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
