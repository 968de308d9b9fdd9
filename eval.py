"""Re-evaluate a finished or partial run from its saved per-task checkpoints.

    python eval.py --run runs/smoke [--output eval.json]

Recomputes the accuracy matrix (class-incremental, task-incremental, TII) of
every completed task and prints FA/CA/FM; writes DIR/eval.json by default.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from norga.continual import evaluate_run
from norga.continual.rundir import atomic_write_bytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="run folder written by train.py")
    parser.add_argument("--output", type=Path, default=None, help="where to write the metrics (default RUN/eval.json)")
    args = parser.parse_args(argv)
    try:
        metrics = evaluate_run(args.run)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.output or args.run / "eval.json"
    atomic_write_bytes(out, (json.dumps(metrics, indent=2) + "\n").encode())
    print(f"{metrics['completed_tasks']}/{metrics['num_tasks']} tasks: FA {metrics['FA']:.4f}  "
          f"CA {metrics['CA']:.4f}  FM {metrics['FM']:.4f}  TII {metrics['tii_accuracy']}  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
