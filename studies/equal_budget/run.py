"""The equal-budget comparison (pre-registered in README.md): every arm tuned by ``norga tune`` on the same kind and
size of search space, the same budget and the ``heldout`` protocol, then evaluated on the evidence benchmark.

    python -m studies.equal_budget.run                      # every arm, in turn; again: continues where it stopped
    python -m studies.equal_budget.run --arms mos ranpac -j 2
    python -m studies.equal_budget.run --time-trial norga_tanh   # the one timed trial of the README's cost estimate
    python -m studies.equal_budget.run --report             # equal_budget.md from the arms' final.json

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

from norga.reports.summary_stats import paired
from norga.tune import TuneRequest, run_tune

HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs"
ARMS = ("norga_tanh", "hideprompt", "no_prompt", "mos", "ranpac")
EVIDENCE_DATA = Path("runs/bench_data/mixed_domains.npz")  # built by python -m bench.mixed_domains
PAIRS = (("norga_tanh", "hideprompt"), ("norga_tanh", "no_prompt"), ("hideprompt", "no_prompt"),
         ("mos", "norga_tanh"), ("ranpac", "norga_tanh"))  # the pre-registered comparisons (README.md)


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


def final_values(arm: str, which: str = "best") -> dict:
    """{seed: FA in %} of an arm's final evaluation (``best``: tuned, ``default``: the evidence arm as is)."""
    summary = json.loads((Path("runs/equal_budget") / arm / "final.json").read_text())
    return {int(k): v for k, v in summary["arms"][which]["FA"]["values"].items()}


def report_lines() -> List[str]:
    """The decision rule applied (README.md): per pair the paired FA difference over the final seeds, tuned and
    untuned, with its 95 % interval; "resolved" when the interval excludes 0."""
    lines = ["| pair | tuned: A - B (FA, pp) | untuned: A - B | verdict (tuned) |", "|---|---|---|---|"]
    for a, b in PAIRS:
        cells = []
        for which in ("best", "default"):
            _, e = paired(final_values(a, which), final_values(b, which))
            cells.append((e, f"{e.mean:+.2f} [{e.low:+.2f}, {e.high:+.2f}]"))
        e = cells[0][0]
        verdict = f"{a} above" if e.low > 0 else f"{b} above" if e.high < 0 else "not resolved"
        lines.append(f"| {a} vs {b} | {cells[0][1]} | {cells[1][1]} | {verdict} |")
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("-j", "--jobs", type=int, default=1, help="tuning workers per arm (norga tune -j)")
    p.add_argument("--time-trial", choices=ARMS, default=None, help="time one trial of this arm, nothing else")
    p.add_argument("--report", action="store_true", help="write equal_budget.md from the finished arms")
    args = p.parse_args(argv)
    if args.report:
        (HERE / "equal_budget.md").write_text("# equal_budget: paired FA differences over seeds 11-15\n\n"
                                              + "\n".join(report_lines()) + "\n")
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
