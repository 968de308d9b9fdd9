"""The rows and the report of the equal-budget study (pre-registered in README.md).

``collect_rows`` reads the finished tune folders (``runs/equal_budget/<arm>``: ``final.json``, ``trials.csv``)
into the rows committed as ``equal_budget.json``, each FA read again from its final run folder (checked against its
checkpoints, which are the truth) and required to equal ``final.json``'s; ``report_text`` turns those rows, and
nothing else, into ``equal_budget.md``, so ``python -m studies.equal_budget.run --report --check`` proves the
committed report is the rows' on any machine (the run folders stay on the machine that ran them).

The decision rule (README.md): per pre-registered pair (A, B) the paired FA difference A − B over the final seeds,
tuned and untuned, with its 95 % Student-t interval; "A above" when the interval lies above 0, "B above" when below,
else "not resolved". How the tuned verdict relates to the untuned one (written 2026-12-05, before any arm of the
study finished):

* ``kept``: both resolved the same way;
* ``reversed``: both resolved, opposite ways;
* ``lost by tuning``: the untuned order was resolved, the tuned one is not;
* ``found by tuning``: the untuned order was not resolved, the tuned one is;
* ``unresolved``: neither is resolved.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from norga.reports.summary_stats import Estimate, describe, paired

ARMS = ("norga_tanh", "hideprompt", "no_prompt", "mos", "ranpac")
PAIRS = (("norga_tanh", "hideprompt"), ("norga_tanh", "no_prompt"), ("hideprompt", "no_prompt"),
         ("mos", "norga_tanh"), ("ranpac", "norga_tanh"))  # the pre-registered comparisons (README.md)
CONFIGS = ("best", "default")  # the tuned configuration, the untuned default (the evidence arm as is)
BUDGET = 5  # finished trials per arm (README.md); with -j 2 a second worker may finish one more (norga tune's rule)


class StaleRows(ValueError):
    """A tune folder's final.json disagrees with its final run folders."""


def run_fa(folder: Path) -> float:
    """FA (%) of the finished final run ``folder``: its metrics.json checked against its checkpoints
    (:meth:`norga.engine.run_folder.RunDir.read_metrics`), finished by the sweep status's rule."""
    from norga.engine.run_folder import RunDir
    from norga.sweep.status import run_state

    metrics, state = RunDir(folder).read_metrics(), run_state(folder)
    if not metrics or state.kind != "done":
        raise StaleRows(f"final run {folder} is not finished ({state.text()}): python -m studies.equal_budget.run "
                        "resumes it")
    return 100 * metrics["FA"]


def checked_fa(runs: Path, arm: str, summary: dict, read_fa: Callable[[Path], float]) -> Dict[str, Dict[str, float]]:
    """{configuration: {seed: FA %}} of ``arm``'s final.json ``summary``, each value read again from its run folder
    ``final/<configuration>_s<seed>`` by ``read_fa``; StaleRows naming the folder when they differ."""
    out: Dict[str, Dict[str, float]] = {}
    for which in CONFIGS:
        out[which] = {}
        for seed in summary["final_seeds"]:
            folder = runs / arm / "final" / f"{which}_s{seed}"
            value, recorded = read_fa(folder), summary["arms"][which]["FA"]["values"].get(str(seed))
            if recorded is None or abs(value - recorded) > 1e-9:
                raise StaleRows(f"{runs / arm / 'final.json'} says FA {recorded} for {folder}, its run folder says "
                                f"{value:.4f}: run python -m studies.equal_budget.run --arms {arm} again (it "
                                "rewrites final.json from the run folders)")
            out[which][str(seed)] = recorded
    return out


def collect_rows(runs: Path, collected: str, read_fa: Callable[[Path], float] = run_fa) -> dict:
    """The study's rows from its tune folders under ``runs``: per finished arm the FA (%) of the tuned and the
    untuned configuration by final seed (checked against the run folders by :func:`checked_fa`), the tuned values,
    and the trials by state; ``collected``: the date."""
    arms = {}
    for arm in ARMS:
        final = runs / arm / "final.json"
        if not final.is_file():
            continue
        summary = json.loads(final.read_text())
        fa_values = checked_fa(runs, arm, summary, read_fa)
        with open(runs / arm / "trials.csv", newline="") as handle:
            trials = list(csv.DictReader(handle))
        states: Dict[str, int] = {}
        for trial in trials:
            states[trial["state"]] = states.get(trial["state"], 0) + 1
        finished = [t for t in trials if t["state"] in ("COMPLETE", "PRUNED")]
        complete = [t for t in finished if t["state"] == "COMPLETE" and t["FA"]]
        arms[arm] = {"FA": fa_values,
                     "best_values": summary["best_values"], "final_seeds": summary["final_seeds"],
                     "protocol": summary["protocol"], "trials": states,
                     "best_trial": int(max(complete, key=lambda t: float(t["FA"]))["number"]) if complete else None,
                     "first_finished": sorted(int(t["number"]) for t in finished)[:BUDGET],
                     "trial_seconds": sum(float(t["seconds"]) for t in trials if t["seconds"])}
    return {"collected": collected, "arms": arms}


def fa(rows: dict, arm: str, which: str) -> Dict[int, float]:
    """{final seed: FA in %} of ``arm``'s tuned (``best``) or untuned (``default``) configuration."""
    return {int(seed): value for seed, value in rows["arms"][arm]["FA"][which].items()}


def side(e: Estimate) -> int:
    """+1 when the 95 % interval lies above 0, -1 below, 0 otherwise (not resolved)."""
    return 1 if e.low > 0 else -1 if e.high < 0 else 0


def relation(tuned: int, untuned: int) -> str:
    """What equal tuning did to the untuned order (module docstring)."""
    if tuned and untuned:
        return "kept" if tuned == untuned else "reversed"
    if untuned:
        return "lost by tuning"
    return "found by tuning" if tuned else "unresolved"


def pair_row(rows: dict, a: str, b: str) -> Tuple[str, str]:
    """(the markdown row of pair a − b, its relation); needs both arms' rows."""
    estimates = {which: paired(fa(rows, a, which), fa(rows, b, which))[1] for which in CONFIGS}
    tuned, untuned = side(estimates["best"]), side(estimates["default"])
    names = {1: f"{a} above", -1: f"{b} above", 0: "not resolved"}
    cells = [f"{e.mean:+.2f} [{e.low:+.2f}, {e.high:+.2f}]" for e in (estimates["best"], estimates["default"])]
    return (f"| {a} − {b} | {cells[0]} | {names[tuned]} | {cells[1]} | {names[untuned]} | "
            f"**{relation(tuned, untuned)}** |", relation(tuned, untuned))


def arm_row(rows: dict, arm: str) -> str:
    """One arm: tuned and untuned FA (mean [95 % interval]), the tuning gain (paired), trials, tuned values."""
    row = rows["arms"][arm]
    cells = []
    for which in CONFIGS:
        e = describe(list(fa(rows, arm, which).values()))
        cells.append(f"{e.mean:.2f} [{e.low:.2f}, {e.high:.2f}]")
    gain = paired(fa(rows, arm, "best"), fa(rows, arm, "default"))[1]
    trials = ", ".join(f"{n} {state.lower()}" for state, n in sorted(row["trials"].items()))
    trials += f"; best #{row['best_trial']}" + ("" if row["best_trial"] in row["first_finished"] else
                                               f" (not among the first {BUDGET} finished)")
    values = ", ".join(f"`{k}={_short(v)}`" for k, v in row["best_values"].items())
    return (f"| {arm} | {cells[0]} | {cells[1]} | {gain.mean:+.2f} [{gain.low:+.2f}, {gain.high:+.2f}] | "
            f"{trials} | {values} |")


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def report_text(rows: dict) -> str:
    """``equal_budget.md`` from the rows alone: the arms, the pairs by the decision rule, what is missing."""
    done = [arm for arm in ARMS if arm in rows["arms"]]
    lines = ["# equal_budget: tuned and untuned FA over the fresh seeds", "",
             f"Generated by `python -m studies.equal_budget.run --report` from `equal_budget.json` (rows collected "
             f"{rows['collected']}). FA in %, mean over the final seeds [95 % Student-t interval]; differences in "
             "points, paired by seed. Protocol `heldout` (tuned on CIFAR-100 classes 20–59, evaluated on the "
             "evidence benchmark).", "",
             "| arm | tuned FA | untuned FA | tuning gain | trials | tuned values |", "|---|---|---|---|---|---|"]
    lines += [arm_row(rows, arm) for arm in done]
    lines += ["", "| pair A − B | tuned | verdict (tuned) | untuned | verdict (untuned) | equal tuning |",
              "|---|---|---|---|---|---|"]
    relations = []
    for a, b in PAIRS:
        if a in rows["arms"] and b in rows["arms"]:
            line, what = pair_row(rows, a, b)
            lines.append(line)
            relations.append(what)
        else:
            lines.append(f"| {a} − {b} | – | not run yet | – | – | – |")
    missing = [arm for arm in ARMS if arm not in rows["arms"]]
    lines += ["", (f"Arms not finished: {', '.join(missing)}." if missing else
                   f"Every arm finished; pairs: {_counts(relations)}.")]
    return "\n".join(lines) + "\n"


def _counts(relations: List[str]) -> str:
    order = ("kept", "reversed", "lost by tuning", "found by tuning", "unresolved")
    return ", ".join(f"{relations.count(r)} {r}" for r in order if r in relations)


def load_rows(path: Path) -> Optional[Mapping]:
    """The committed rows, or None when they are not there yet."""
    return json.loads(path.read_text()) if path.is_file() else None
