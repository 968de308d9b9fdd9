"""Re-evaluate a finished or partial run from its saved per-task checkpoints.

    python eval.py --run runs/smoke [--output eval.json]

Recomputes the accuracy matrix (class-incremental, task-incremental, TII) of every
completed task and prints FA/CA/FM; writes DIR/eval.json by default. Same as
``norga eval ...`` (see norga/commands/cli.py).
"""
import sys

from norga.commands.cli import eval_main

main = eval_main

if __name__ == "__main__":
    sys.exit(eval_main())
