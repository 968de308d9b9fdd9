"""The process that runs the GPU check's steps: ``python -m bench.gpu_check_worker PLAN.json`` (started by
``bench.gpu_check``, which watches the clock and stops this process when a step overruns its budget).

PLAN.json: ``{"steps": [names], "device": "cuda", "tiny": false, "data": DIR, "out": DIR, "scratch": DIR,
"deadlines": {name: epoch seconds}, "check_deadline": epoch seconds}`` (``bench.gpu_check`` gives each worker one
step). Every event is appended at once as one JSON line to ``OUT/events.jsonl``: ``{"step", "event": "start"}``,
``{"step", "event": "partial", "key", "value"}`` and ``{"step", "event": "end", "status": "ok" | "failed" |
"skipped", "result" | "error" (+ ``"fatal": true`` when the other steps cannot run) | "reason" + "missing",
"seconds"}``; a failed step's traceback goes to ``OUT/logs/``.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import torch

from norga.models.checkpoints import first_line

from .gpu_check_env import StepSkipped
from .gpu_check_steps import STEPS, Context

EVENTS = "events.jsonl"


class Events:
    """Appends one JSON line per event to ``path`` and flushes it to disk (the watching process reads it)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, **event) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({**event, "time": time.time()}, default=str) + "\n")
            f.flush()


def run_plan(plan: dict) -> None:
    out = Path(plan["out"])
    events = Events(out / EVENTS)
    for name in plan["steps"]:
        start = time.time()
        ctx = Context(torch.device(plan["device"]), plan["tiny"], Path(plan["data"]) if plan["data"] else None, out,
                      Path(plan["scratch"]), plan["deadlines"][name], plan["check_deadline"])
        events.write(step=name, event="start")
        print(f"[gpu_check] step {name} ({plan['deadlines'][name] - start:.0f} s left of its budget) ...", flush=True)

        def emit(key: str, value: object, _step: str = name) -> None:
            events.write(step=_step, event="partial", key=key, value=value)

        run_step(name, ctx, emit, events, start)


def run_step(name: str, ctx: Context, emit, events: Events, start: float) -> None:
    """One step: its end event (ok with its result, skipped with the reason, or failed with the error)."""
    seconds = lambda: round(time.time() - start, 2)  # noqa: E731 - read at the end
    try:
        result = STEPS[name](ctx, emit)
        events.write(step=name, event="end", status="ok", result=result, seconds=seconds())
    except StepSkipped as skip:
        events.write(step=name, event="end", status="skipped", reason=skip.reason, missing=skip.missing,
                     seconds=seconds())
        print(f"[gpu_check] {name} skipped: {skip.reason}", flush=True)
    except Exception as err:  # the step's failure is its record; the next step still runs
        (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
        (ctx.out / "logs" / f"{name}_traceback.txt").write_text(traceback.format_exc())
        events.write(step=name, event="end", status="failed", error=f"{type(err).__name__}: {first_line(err)}",
                     fatal=bool(getattr(err, "fatal", False)), seconds=seconds())
        print(f"[gpu_check] {name} failed: {type(err).__name__}: {first_line(err)}", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_plan(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
