"""norga's side of the speed report: ``norga train`` in this process, its stage functions timed.

    python -m crosscheck.speed.norga_side --data SMALL.npz --out RUN --seed 42 --threads 2 --t0 SECONDS \
        --timings FILE [--config configs/crosscheck/norga.yaml] [--set KEY=VALUE ...]

The run is the ordinary ``norga train --config CONFIG --output-dir RUN --set seed=S --set data.root=SMALL.npz``
(nothing in it changes: the timers watch the methods' declared stages, ``norga.methods.hooks``, and compute nothing;
``evaluation`` is the method's predictions, ``Method.predict``, the test loader's own time is ``other``); one JSON
line (seconds per stage of crosscheck/speed/stage_timer.py, wall, the run's accuracy matrix) is appended to FILE.
"""
from __future__ import annotations

import time

T_IMPORT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from crosscheck.speed.stage_timer import StageTimer, write  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "crosscheck" / "norga.yaml"


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
    from norga.commands.cli import main as norga_main
    from norga.methods.hooks import HOOKS
    sets = [f"seed={args.seed}", f"data.root={args.data}", *args.set]
    with HOOKS.watching_stages(timer.stage):  # the methods' declared stages: tii, wtp, tap, statistics, ...
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
