"""``norga export --run RUN --out DIR [--push REPO]`` and ``norga eval --from EXPORT`` (:mod:`norga.engine.export`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..config import ConfigError
from ..outputs import OUTPUT_FOLDER
from .environment import check_environment


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", "--run-dir", dest="run", required=True, type=Path, help="a run folder")
    parser.add_argument("--out", required=True, type=OUTPUT_FOLDER,
                        help="a new (or empty) folder for the export, outside any run folder or export")
    parser.add_argument("--push", default=None, metavar="REPO",
                        help="then upload the export to this Hugging Face Hub model repo (needs huggingface-cli "
                             "login or HF_TOKEN)")


def run_export(args: argparse.Namespace) -> int:
    check_environment()
    from ..engine.export import check_repo_id, export_run, push_export

    if args.push:
        check_repo_id(args.push)  # a mistyped repo id before the export is written
    done, metrics = export_run(args.run, args.out)
    print(f"exported {done} of {metrics.get('num_tasks')} task(s) of {args.run} (FA {metrics.get('FA')}) -> {args.out}")
    if args.push:
        print(f"pushed {args.out} to the Hugging Face Hub: {push_export(args.out, args.push)}")
    return 0


def run_eval_export(args: argparse.Namespace) -> int:
    """``norga eval --from EXPORT``: verify the export folder, check ``--output`` (default EXPORT/eval.json, the
    only file eval may write inside an export), evaluate, write the metrics through the write guard."""
    from ..engine.export import evaluate_export, verify_export
    from ..outputs import Zone, check_output, write_output

    if args.overrides or args.config:
        raise ConfigError("norga eval --from takes neither --set nor --config: an export is evaluated with its own "
                          "config.yaml (edit a copy of the export to change it)")
    export = Path(args.export)
    out = args.output or export / "eval.json"
    zone = Zone(export, frozenset({"eval.json"}))
    verified = verify_export(export)
    check_output(out, "--output", zone)  # before the evaluation: a refused output costs nothing
    metrics = evaluate_export(export, getattr(args, "feature_cache", None), verified)
    write_output(out, (json.dumps(metrics, indent=2) + "\n").encode(), option="--output", zone=zone)
    print(f"{metrics['completed_tasks']} of {metrics['num_tasks']} tasks evaluated: FA {metrics['FA']:.4f}  "
          f"CA {metrics['CA']:.4f}  FM {metrics['FM']:.4f}  -> {out}")
    return 0
