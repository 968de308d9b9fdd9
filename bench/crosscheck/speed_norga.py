"""norga's side of the speed report: ``norga train`` in this process, its stage functions timed.

    python -m bench.crosscheck.speed_norga --data SMALL.npz --out RUN --seed 42 --threads 2 --t0 SECONDS \
        --timings FILE [--config configs/crosscheck/norga.yaml] [--set KEY=VALUE ...]

The run is the ordinary ``norga train --config CONFIG --output-dir RUN --set seed=S --set data.root=SMALL.npz``
(nothing in it changes: the timers wrap functions, they compute nothing); one JSON line (seconds per stage of
bench/crosscheck/stage_timer.py, wall, the run's accuracy matrix) is appended to FILE.
"""
from __future__ import annotations

import time

T_IMPORT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.crosscheck.stage_timer import StageTimer, write  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "crosscheck" / "norga.yaml"


def _frozen_pass_stage(_method, _model, _loader, desc: str = "frozen feats") -> str:
    return "diagnostics" if "diagnostic" in desc else "statistics"


def time_stages(timer: StageTimer) -> None:
    """Wrap the functions of norga's HiDe-Prompt pipeline that run each stage (imports torch and norga)."""
    from norga.engine import task_loop
    from norga.methods import hideprompt, hideprompt_diagnostics
    cls = hideprompt.HiDePrompt
    timer.patch(cls, "_train_tii", "tii")  # training and (t > 0) alignment of the task-identity head
    timer.patch(cls, "_train_wtp", "wtp")
    timer.patch(cls, "_train_tap", "tap")
    timer.patch(cls, "frozen_pass", _frozen_pass_stage)
    timer.patch(hideprompt, "extract_features", "statistics")  # the prompted pass of the instructed statistics
    timer.patch(hideprompt_diagnostics, "task_diagnostics", "diagnostics")
    timer.patch(task_loop, "evaluate_task", "evaluation")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--data", type=Path, required=True, help="the small task's .npz")
    p.add_argument("--out", type=Path, required=True, help="the run folder")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--t0", type=float, default=None, help="time.time() when the parent started this process")
    p.add_argument("--timings", type=Path, required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    args = p.parse_args(argv)
    timer = StageTimer(args.t0 if args.t0 is not None else T_IMPORT)
    import torch
    torch.set_num_threads(args.threads)
    time_stages(timer)
    from norga.commands.cli import main as norga_main
    sets = [f"seed={args.seed}", f"data.root={args.data}", *args.set]
    code = norga_main(["train", "--config", str(args.config), "--output-dir", str(args.out),
                       *(f for s in sets for f in ("--set", s))])
    if code:
        return code
    metrics = json.loads((args.out / "metrics.json").read_text())
    write(args.timings, timer.record(side="norga", stage=0, seed=args.seed, threads=args.threads,
                                     acc_matrix=metrics["acc_matrix"], FA=metrics["FA"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
