"""Train a class-incremental run (all stages, all tasks); resumes after the last completed task.

    python train.py --config configs/smoke.yaml --output-dir runs/smoke [--set wtp.epochs=3 ...] [--dry-run] [--force]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from norga.config import ConfigError, load_config
from norga.continual import dry_run, run_training
from norga.continual.runner import RunConfigMismatch
from norga.data import DataError
from norga.models.backbone import CheckpointError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config, e.g. configs/cifar100_norga.yaml")
    parser.add_argument("--output-dir", default=None, help="run folder (default: runs/<config name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set wtp.epochs=3 (repeatable)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate config, data and checkpoint, print the task split, train nothing")
    parser.add_argument("--force", action="store_true", help="resume even if the config changed")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        if args.dry_run:
            print(dry_run(cfg))
            print("dry run OK: config, data and checkpoint are usable")
            return 0
        out = Path(args.output_dir or Path("runs") / Path(args.config).stem)
        metrics = run_training(cfg, out, force=args.force)
    except (ConfigError, RunConfigMismatch, DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"FA {metrics['FA']:.4f}  CA {metrics['CA']:.4f}  FM {metrics['FM']:.4f}  -> {out}/metrics.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
