"""The equal-budget comparison (pre-registered in README.md): every arm tuned by ``norga tune`` on the same kind and
size of search space, the same budget and the ``heldout`` protocol, then evaluated on the evidence benchmark.

    python -m studies.equal_budget.run                      # every arm, in turn; again: continues where it stopped
    python -m studies.equal_budget.run --arms mos ranpac -j 2
    python -m studies.equal_budget.run --time-trial norga_tanh   # the one timed trial of the README's cost estimate
    python -m studies.equal_budget.run --collect            # equal_budget.json (committed) from the arms' folders
    python -m studies.equal_budget.run --report [--check]   # equal_budget.md from equal_budget.json alone

Each arm is one tune folder ``runs/equal_budget/<arm>`` (its spec's ``output``) holding its Optuna study
(SQLite), so the script is resumable: a finished trial is never run again, a killed one is marked failed and
replaced, finished final runs are kept. ``--time-trial ARM`` runs one trial of ARM alone into
``runs/equal_budget/timing/<arm>`` (no final evaluation) and prints its wall time.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import List, Optional

import yaml

from norga.files import atomic_write_bytes
from norga.tune import TuneRequest, run_tune
from studies.equal_budget.report import ARMS, StaleRows, collect_rows, load_rows, report_text
from studies.generated import write_or_check

HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs"
EVIDENCE_DATA = Path("runs/bench_data/mixed_domains.npz")  # built by python -m bench.mixed_domains
RUNS = Path("runs/equal_budget")  # the tune folders (each spec's out)
ROWS, REPORT = HERE / "equal_budget.json", HERE / "equal_budget.md"  # committed


def spec_of(arm: str) -> Path:
    return SPECS / f"{arm}.yaml"


def run_arm(arm: str, jobs: int) -> dict:
    """Tune one arm and evaluate it (resuming its tune folder)."""
    return run_tune(TuneRequest(spec=spec_of(arm), jobs=jobs), log=lambda line: print(f"[{arm}] {line}", flush=True))


def time_one_trial(arm: str, out: Path) -> float:
    """Wall seconds of one trial of ``arm`` (a one-trial copy of its spec, no final evaluation)."""
    spec = yaml.safe_load(spec_of(arm).read_text())
    spec.update(budget={"trials": 1}, output=str(out / arm), study_name=f"{arm}_timing")
    out.mkdir(parents=True, exist_ok=True)
    copy = out / f"{arm}.yaml"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    start = time.time()
    run_tune(TuneRequest(spec=copy, final=False), log=print)
    return time.time() - start


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("-j", "--jobs", type=int, default=1, help="tuning workers per arm (norga tune -j)")
    p.add_argument("--time-trial", choices=ARMS, default=None, help="time one trial of this arm, nothing else")
    p.add_argument("--collect", action="store_true", help=f"write {ROWS.name} from the finished arms in {RUNS}")
    p.add_argument("--report", action="store_true", help=f"write {REPORT.name} from {ROWS.name}")
    p.add_argument("--check", action="store_true", help=f"with --report: exit 1 unless {REPORT.name} is current")
    args = p.parse_args(argv)
    if args.collect:
        try:
            rows = collect_rows(RUNS, time.strftime("%Y-%m-%d"))
        except StaleRows as err:
            p.error(str(err))
        if not rows["arms"]:
            p.error(f"no finished arm in {RUNS} (an arm is finished when its final.json is there)")
        atomic_write_bytes(ROWS, (json.dumps(rows, indent=1, sort_keys=True) + "\n").encode())
        print(f"{ROWS}: {len(rows['arms'])} arm(s): {', '.join(rows['arms'])}")
    if args.report or args.check:
        rows = load_rows(ROWS)
        if rows is None:
            p.error(f"{ROWS} is missing: python -m studies.equal_budget.run --collect (after the arms ran)")
        return write_or_check(REPORT, report_text(rows), args.check)
    if args.collect:
        return 0
    if args.time_trial:
        seconds = time_one_trial(args.time_trial, Path("runs/equal_budget/timing"))
        print(f"one trial of {args.time_trial}: {seconds / 60:.1f} min wall")
        return 0
    if not EVIDENCE_DATA.is_file():
        p.error(f"{EVIDENCE_DATA} is missing: python -m bench.mixed_domains --out {EVIDENCE_DATA}")
    for arm in args.arms:
        run_arm(arm, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
