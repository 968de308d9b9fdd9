"""``norga eval --run RUN`` (and ``--from EXPORT``, :mod:`norga.commands.export_command`): re-evaluate saved
states, optionally reading frozen test features from a feature store."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..outputs import OUTPUT_FILE, OUTPUT_FOLDER
from .environment import check_environment
from .export_command import run_eval_export
from .guard import guarded


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", "--run-dir", dest="run", type=Path,
                        help="run folder written by norga train (under torchrun write --run-dir: torchrun "
                             "takes --run for its own --run-path)")
    source.add_argument("--from", dest="export", type=Path, metavar="EXPORT",
                        help="a folder written by norga export (the run folder is not needed)")
    parser.add_argument("--output", type=OUTPUT_FILE, default=None,
                        help="where to write the metrics (default RUN/eval.json, EXPORT/eval.json)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="evaluate on other data: change an evaluation key of the checkpoints' config, e.g. "
                             "--set data.test_per_class=50 (repeatable; recorded in eval.json as eval_overrides)")
    parser.add_argument("--config", default=None,
                        help="a config to compare with the checkpoints' (only evaluation keys such as "
                             "data.root or data.test_per_class may differ; they are applied with a warning)")
    parser.add_argument("--feature-cache", type=OUTPUT_FOLDER, default=None, metavar="DIR",
                        help="a frozen-feature store (as norga train --feature-cache): frozen test features "
                             "computed by an earlier run or evaluation are read, not computed")


def run_eval(args: argparse.Namespace) -> int:
    import json

    check_environment()
    from ..engine import evaluate_run
    from ..toolkit.distributed import is_main
    from ..engine.eval_config import override_warning
    from ..engine.run_marker import require_run_folder
    from ..outputs import Zone, check_output, write_output

    if args.export is not None:
        return run_eval_export(args)
    out = args.run / "eval.json" if args.output is None else args.output
    require_run_folder(args.run)
    zone = Zone(args.run, frozenset({"eval.json"}))  # the one name norga eval writes inside the run folder
    check_output(out, "--output", zone)  # before the evaluation: a refused output costs nothing
    metrics = evaluate_run(args.run, args.config, args.overrides, args.feature_cache)
    if not is_main():  # torchrun: rank 0 writes and prints
        return 0
    if metrics["eval_overrides"]:
        print(override_warning(args.run, metrics["eval_overrides"]), file=sys.stderr)
    write_output(out, (json.dumps(metrics, indent=2) + "\n").encode(), "--output", zone)
    print(f"{metrics['completed_tasks']} of {metrics['num_tasks']} tasks evaluated: FA {metrics['FA']:.4f}  "
          f"CA {metrics['CA']:.4f}  FM {metrics['FM']:.4f}  TII {metrics['tii_accuracy']}  -> {out}")
    return 0


def eval_main(argv: Optional[Sequence[str]] = None) -> int:
    """``eval.py`` / ``norga eval``: re-evaluate a run from its saved per-task checkpoints."""
    parser = argparse.ArgumentParser(prog="norga eval", description="Re-evaluate a run from its checkpoints.")
    add_eval_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: run_eval(args), lambda: "nothing was written")
