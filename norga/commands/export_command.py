"""``norga export --run RUN --out DIR [--push REPO]`` and ``norga eval --from EXPORT`` (:mod:`norga.engine.export`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..config import ConfigError
from .environment import check_environment


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", "--run-dir", dest="run", required=True, type=Path, help="a run folder")
    parser.add_argument("--out", required=True, type=Path, help="a new (or empty) folder for the export")
    parser.add_argument("--push", default=None, metavar="REPO",
                        help="then upload the export to this Hugging Face Hub model repo (needs huggingface-cli "
                             "login or HF_TOKEN)")


def run_export(args: argparse.Namespace) -> int:
    check_environment()
    from ..engine.export import check_repo_id, export_run, push_export

    if args.push:
        check_repo_id(args.push)  # a mistyped repo id before the export is written
    done, metrics = export_run(args.run, args.out)
    print(f"exported {done} task(s) of {args.run} (FA {metrics.get('FA')}) -> {args.out}")
    if args.push:
        print(f"pushed {args.out} to the Hugging Face Hub: {push_export(args.out, args.push)}")
    return 0


def run_eval_export(args: argparse.Namespace) -> int:
    """``norga eval --from EXPORT``: the accuracy matrix of an export folder (:mod:`norga.engine.export`)."""
    from ..engine.export import evaluate_export
    from ..files import atomic_write_bytes

    if args.overrides or args.config:
        raise ConfigError("norga eval --from takes neither --set nor --config: an export is evaluated with its own "
                          "config.yaml (edit a copy of the export to change it)")
    out = args.output or args.export / "eval.json"
    metrics = evaluate_export(args.export, getattr(args, "feature_cache", None))
    atomic_write_bytes(out, (json.dumps(metrics, indent=2) + "\n").encode(), option="--output")
    print(f"{metrics['completed_tasks']} of {metrics['num_tasks']} tasks evaluated: FA {metrics['FA']:.4f}  "
          f"CA {metrics['CA']:.4f}  FM {metrics['FM']:.4f}  -> {out}")
    return 0
