"""Train a class-incremental run (all stages, all tasks); resumes after the last completed task.

    python train.py --config configs/smoke.yaml --output-dir runs/smoke [--set wtp.epochs=3 ...] [--dry-run] [--force]

Same as ``norga train ...`` (see norga/commands/cli.py).
"""
import sys

from norga.commands.cli import train_main

main = train_main

if __name__ == "__main__":
    sys.exit(train_main())
