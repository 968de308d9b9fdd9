"""``norga tune SPEC.yaml``: hyperparameter search with Optuna on a protocol that keeps the evaluation data out of
tuning (docs/tuning.md).

    norga tune configs/tune/smoke.yaml                      # one worker in this process; again: continues
    norga tune SPEC --out tunes/x -j 4                      # four worker processes on this machine
    norga tune SPEC --launcher slurm -j 8 --partition gpu   # eight SLURM jobs (pip install norga[cluster])
    norga tune SPEC --storage postgresql://u@host/db --worker 3   # one more worker, on any machine

Writes into the tune folder (``--out``; default the spec's ``output``, else ``tunes/<study>``): ``study.db``, the
trial runs ``trials/``, ``trials.csv``, ``best.yaml`` (a config ``norga train --config`` takes), ``plots/``, and,
once the budget is spent, ``final/`` and ``final.md`` (the best and the default configuration over fresh seeds).
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import List, Optional

from ..outputs import OUTPUT_FOLDER
from .guard import guarded


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="norga tune", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n")[1])
    p.add_argument("spec", metavar="SPEC.yaml", help="the tuning spec (docs/tuning.md; e.g. configs/tune/smoke.yaml)")
    p.add_argument("--out", type=OUTPUT_FOLDER, default=None,
                   help="the tune folder (default: the spec's output, else tunes/<study name>)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the study's SQLAlchemy URL (default: sqlite:///<tune folder>/study.db)")
    p.add_argument("--oracle", action="store_true",
                   help="allow protocol oracle (tuned on the evaluation test data; every output says 'oracle')")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes sharing the study (default 1: "
                   "this process)")
    p.add_argument("--launcher", default="local", help="how the workers start: local, slurm, submitit-local "
                   "(the sweep launchers)")
    p.add_argument("--partition", default=None, help="SLURM partition (--launcher slurm)")
    p.add_argument("--time-min", type=int, default=None, help="SLURM time limit per worker in minutes")
    p.add_argument("--gpus-per-job", type=int, default=None, help="GPUs per worker (--launcher slurm)")
    p.add_argument("--worker", type=int, default=None, metavar="K",
                   help="run as worker K only: the optimize loop, no reports or final evaluation")
    p.add_argument("--no-final", dest="final", action="store_false",
                   help="skip the final evaluation over fresh seeds")
    return p


def request_of(args: argparse.Namespace):
    from ..tune import TuneRequest

    slurm = {k: v for k, v in (("partition", args.partition), ("time_min", args.time_min),
                               ("gpus_per_job", args.gpus_per_job)) if v is not None}
    if args.jobs < 1:
        from ..errors import NorgaError

        raise NorgaError(f"-j/--jobs: expected a number of workers >= 1, got {args.jobs}")
    return TuneRequest(spec=Path(args.spec), out=args.out, storage=args.storage, oracle=args.oracle,
                       worker=args.worker, jobs=args.jobs, launcher=args.launcher, final=args.final,
                       launcher_options=slurm)


class NewTuneFolder:
    """The tune folder as it was before the command: :meth:`discard` (on failure) removes it only when this command
    created it and no trial ran in it (it holds the marker, the manifest and an empty study at most)."""

    KEPT_EMPTY = {"norga-tune.json", ".norga-written.json", "study.db"}

    def __init__(self, folder: Optional[Path]):
        self.folder = folder
        self.existed = folder is None or folder.exists()

    def discard(self) -> None:
        if self.existed or not self.folder.is_dir():
            return
        if {p.name for p in self.folder.iterdir()} <= self.KEPT_EMPTY:
            shutil.rmtree(self.folder)


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)

    def run() -> int:
        from ..tune import run_tune

        run_tune(request_of(args), log=lambda line: print(line, flush=True))
        return 0

    folder = NewTuneFolder(_folder_guess(args))
    return guarded(run, lambda: "finished trials are kept in the study; run the same command again to continue",
                   folder.discard)


def _folder_guess(args: argparse.Namespace) -> Optional[Path]:
    """The tune folder this command will use, when it can be known without reading the spec (``--out``)."""
    return Path(args.out) if args.out is not None else None
