"""norga's TUNA run with the first task's initial tensors written or exchanged (the TUNA swap of
docs/crosscheck.md):

    python -m crosscheck.tuna.swap_norga [--init-out FILE] [--init-in FILE] -- \\
        train --config configs/crosscheck/tuna.yaml --output-dir DIR --set seed=1997

Everything after ``--`` is a ``norga`` command line, run in this process. Right after the method drew task 0's
adapter (every block) and head, ``--init-out`` writes them and ``--init-in`` copies FILE's tensors over them
(``crosscheck.tuna.first_task_init``); nothing else of the run changes. FILE may come from
``crosscheck/tuna/reference_run.py --init-out`` (the reference's draws for a seed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crosscheck.tuna.first_task_init import exchange_first_task_init

NORGA_NAMES = {"down": "down", "up": "up"}


def first_task_exchange(init_in, init_out):
    """A context in which task 0 of a TUNA run first exchanges its drawn adapter and head (the hook point
    ``adapter_drawn`` of :mod:`norga.methods.hooks`) before they are trained."""
    from norga.methods.hooks import HOOKS

    def exchange(method, task, new):
        if task == 0:
            exchange_first_task_init(NORGA_NAMES, new, method.heads[0], init_in, init_out)

    return HOOKS.observed("adapter_drawn", exchange)


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
    from norga.commands.cli import main as norga_main

    with first_task_exchange(args.init_in, args.init_out):
        return norga_main(argv[cut + 1:])


if __name__ == "__main__":
    raise SystemExit(main())
