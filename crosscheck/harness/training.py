"""Training side of the cross-check: norga and the reference code on the same small task, 3 seeds per side.

    python -m crosscheck.harness.training --collect DIR   # DIR's runs into bench/results/crosscheck_training.json
    python -m crosscheck.harness.training --collect DIR --sides norga --keep-as norga_shared_stream
                                                        # re-collect norga's side only; its old rows kept, relabelled
    python -m crosscheck.harness.training                 # print the tables of the committed rows

DIR holds what ``docs/crosscheck.md`` ("Repeat the training runs") produces:

* ``logs/ref_<method>_<variant>_s<seed>.log`` — the NoRGa authors' code (L2P, DualPrompt, their "S-Prompt"),
  variant ``fixed`` (batch vote off, prefix reshape permuted) or ``shipped`` (as released);
* ``runs/ref_coda/results-acc/pt.yaml`` — the official CODA-Prompt code, seeds 0, 1, 2 (its ``--repeat 3``);
* ``runs/norga_<config>_s<seed>/metrics.json`` — norga's run folders.

Every accuracy matrix is scored by :mod:`norga.reports.metrics` (FA, CA, FM, FM_official = the authors' forgetting,
FGT_coda = CODA-Prompt's), so both sides are summarised by the same code. Accuracies are fractions in the JSON
and percent in the tables.
"""
from __future__ import annotations

import argparse
import json
import re
from functools import partial
from pathlib import Path
from typing import List, Optional

import numpy as np
import yaml

from bench.crosscheck_tables import METHODS, RESULTS, SIDES, load, mean_lines, per_seed_lines
from norga.reports.metrics import as_matrix, forgetting_coda, summarize

PROMPT_FREE = "norga_simplecil"
EVAL_LINE = re.compile(r"^\* Acc@task ([\d.]+) Acc@1 ([\d.]+)")
AVERAGE_LINE = re.compile(r"^\[Average accuracy till task(\d+)\]")


def scores(S: np.ndarray, task_acc: Optional[float] = None) -> dict:
    """The metrics of accuracy matrix ``S`` (fractions, NaN below the diagonal's left) and the matrix itself."""
    rows = [[None if np.isnan(v) else float(v) for v in row] for row in S]
    out = {k: v for k, v in summarize(rows).items() if k != "BWT"}
    return {**out, "FGT_coda": forgetting_coda(as_matrix(rows)), "task_acc": task_acc, "acc_matrix": rows}


def authors_log(path: Path, top_1: bool = True) -> dict:
    """Accuracy matrix of one finished run of the authors' code from its log: after task t it prints ``* Acc@task
    a Acc@1 b`` for tasks 0..t, then ``[Average accuracy till task<t+1>]``; a finished run ends with ``Total
    training time``. task_acc = mean Acc@task after the last task (the share of samples whose top-1 prompt id is
    their task); None unless ``top_1`` (L2P's prompt ids are not task ids)."""
    text = path.read_text()
    if "Total training time" not in text:
        raise ValueError(f"{path}: no 'Total training time' line (the run did not finish)")
    evals, matrices = [], []
    for line in text.splitlines():
        if (m := EVAL_LINE.match(line)):
            evals.append((float(m.group(1)) / 100, float(m.group(2)) / 100))
        elif (m := AVERAGE_LINE.match(line)):
            t = int(m.group(1))
            if len(evals) != t:
                raise ValueError(f"{path}: {len(evals)} evaluations before 'till task{t}', expected {t}")
            matrices.append(evals)
            evals = []
    if not matrices:
        raise ValueError(f"{path}: no finished task (the run did not complete)")
    T = len(matrices)
    S = np.full((T, T), np.nan)
    for t, evals_t in enumerate(matrices):
        S[: t + 1, t] = [acc for _, acc in evals_t]
    return scores(S, float(np.mean([task for task, _ in matrices[-1]])) if top_1 else None)


def coda_results(run: Path) -> List[dict]:
    """One score dict per seed of the official CODA-Prompt run (``results-acc/pt.yaml``: history[task][after]
    [seed], percent)."""
    history = np.asarray(yaml.safe_load((run / "results-acc" / "pt.yaml").read_text())["history"], dtype=float)
    out = []
    for r in range(history.shape[2]):
        S = history[:, :, r] / 100
        S[np.tril_indices(len(S), -1)] = np.nan  # S[i, t] for t < i is undefined (the file holds zeros)
        out.append(scores(S))
    return out


def norga_run(run: Path) -> dict:
    """Scores of a finished norga run folder; task_acc = mean task-identification accuracy after the last task."""
    metrics = json.loads((run / "metrics.json").read_text())
    if metrics["completed_tasks"] != metrics["num_tasks"]:
        raise ValueError(f"{run}: {metrics['completed_tasks']} of {metrics['num_tasks']} tasks (not finished)")
    tii = metrics.get("tii_accuracy")  # per task after the last one, or None (no task inference)
    return scores(as_matrix(metrics["acc_matrix"]), float(np.mean(tii)) if tii else None)


def _sources(root: Path, method: str) -> List[tuple]:
    """(side, seed, path, parser) of every run a method's table reads."""
    ref, ours, seeds = METHODS[method]
    out = []
    for seed in seeds:
        out.append(("norga", seed, root / "runs" / f"{ours}_s{seed}" / "metrics.json", norga_run))
        out.append(("simplecil", seed, root / "runs" / f"{PROMPT_FREE}_s{seed}" / "metrics.json", norga_run))
        if method != "coda":
            for variant in ("fixed", "shipped"):
                parse = authors_log if method != "l2p" else partial(authors_log, top_1=False)
                out.append((f"reference_{variant}", seed, root / "logs" / f"{ref}_{variant}_s{seed}.log", parse))
    return out


def collect(root: Path, sides: Optional[tuple] = None) -> tuple:
    """(rows, missing): every run under ``root`` as rows {method, side, seed, metrics...}, and the paths of
    the runs that are absent or unfinished (with the reason). ``sides``: only those (default: all)."""
    rows, missing = [], []
    for method in METHODS:
        for side, seed, path, parse in _sources(root, method):
            if sides is not None and side not in sides:
                continue
            try:
                rows.append({"method": method, "side": side, "seed": seed,
                             **parse(path.parent if parse is norga_run else path)})
            except FileNotFoundError as e:
                if side != "reference_shipped":  # the as-released variant is an extra, run for some seeds only
                    missing.append(f"{path}: {e}")
            except (OSError, ValueError) as e:
                missing.append(f"{path}: {e}")
        if method == "coda" and (sides is None or "reference_fixed" in sides):
            seeds, run = METHODS[method][2], root / "runs" / METHODS[method][0]
            try:
                scored = coda_results(run)
                for seed, score in zip(seeds, scored):
                    rows.append({"method": method, "side": "reference_fixed", "seed": seed, **score})
                if len(scored) < len(seeds):
                    missing.append(f"{run}: {len(scored)} of {len(seeds)} repeats finished")
            except (OSError, ValueError) as e:
                missing.append(f"{root / 'runs' / METHODS[method][0]}: {e}")
    return rows, missing


def merge(old: List[dict], new: List[dict], sides: tuple, keep_as: Optional[str]) -> List[dict]:
    """``old`` rows with those of ``sides`` replaced by ``new``; with ``keep_as`` the replaced rows stay, their
    side renamed (e.g. norga's rows of an earlier version), replacing any rows already under that name."""
    if keep_as in sides or keep_as in ("reference_fixed", "norga", "reference_shipped", "simplecil"):
        raise ValueError(f"--keep-as {keep_as!r} would overwrite a side that is collected or compared")
    kept = [r for r in old if r["side"] not in sides and r["side"] != keep_as]
    renamed = [{**r, "side": keep_as} for r in old if keep_as and r["side"] in sides]
    return kept + renamed + new


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collect", type=Path, default=None, help="folder of the runs to parse into --results")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--sides", nargs="+", choices=SIDES, default=None,
                   help="collect only these sides and keep the other sides' rows of --results (default: all)")
    p.add_argument("--keep-as", default=None, help="with --sides: keep the replaced rows under this side name")
    args = p.parse_args(argv)
    if args.keep_as and not args.sides:
        p.error("--keep-as needs --sides (the sides whose old rows it keeps)")
    if args.collect:
        rows, missing = collect(args.collect, tuple(args.sides) if args.sides else None)
        if args.sides:
            try:
                rows = merge(load(args.results), rows, tuple(args.sides), args.keep_as)
            except ValueError as e:
                p.error(str(e))
        args.results.write_text(json.dumps({"rows": rows, "missing": missing}, indent=1) + "\n")
        for m in missing:
            print(f"missing: {m}")
    rows = load(args.results)
    print("\n".join(mean_lines(rows)))
    for method in METHODS:
        print(f"\n{method}\n" + "\n".join(per_seed_lines(rows, method)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
