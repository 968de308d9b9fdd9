"""norga's TUNA run with the first task's initial tensors written or exchanged (the TUNA swap of
docs/crosscheck.md):

    python -m bench.crosscheck.tuna_swap_norga [--init-out FILE] [--init-in FILE] -- \\
        train --config configs/crosscheck/tuna.yaml --output-dir DIR --set seed=1997

Everything after ``--`` is a ``norga`` command line, run in this process. Right after the method drew task 0's
adapter (every block) and head, ``--init-out`` writes them and ``--init-in`` copies FILE's tensors over them
(``bench.crosscheck.tuna_init``); nothing else of the run changes. FILE may come from
``bench/crosscheck/tuna_reference_run.py --init-out`` (the reference's draws for a seed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.crosscheck.tuna_init import exchange_first_task_init

NORGA_NAMES = {"down": "down", "up": "up"}


def hook_first_task(init_in, init_out) -> None:
    """Wrap ``TUNA.train_adapter`` so that task 0 first exchanges its drawn adapter and head."""
    from norga.methods.tuna import TUNA

    original = TUNA.train_adapter

    def train_adapter(self, task, new, loader):
        if task == 0:
            exchange_first_task_init(NORGA_NAMES, new, self.heads[0], init_in, init_out)
        return original(self, task, new, loader)

    TUNA.train_adapter = train_adapter


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("give the norga command after '--', e.g. -- train --config configs/crosscheck/tuna.yaml "
                         "--output-dir DIR --set seed=1997")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init-out", type=Path, help="write task 0's initial adapter and head here")
    p.add_argument("--init-in", type=Path, help="start task 0 from these initial tensors")
    args = p.parse_args(argv[:cut])
    if args.init_in is None and args.init_out is None:
        raise SystemExit("give --init-out FILE, --init-in FILE or both")
    hook_first_task(args.init_in, args.init_out)
    from norga.commands.cli import main as norga_main

    return norga_main(argv[cut + 1:])


if __name__ == "__main__":
    raise SystemExit(main())
