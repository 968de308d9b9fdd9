"""Real-data benchmarks on a 2-core CPU: NoRGa vs HiDe-Prompt (linear gate) vs no prompts, paired over seeds.

    python -m bench.real_data_cpu                                   # the evidence regime, all arms, seeds 1-5
    python -m bench.real_data_cpu --seeds 1 2 --only no_prompt      # a part of it (resumes, appends rows)
    python -m bench.real_data_cpu --quick                           # < 2 minutes: every arm, 2 seeds, tiny budget
    python -m bench.real_data_cpu --regime cifar100_first --seeds 42 43   # the first, too-small regime
    python -m bench.real_data_cpu --merge runs/lanes/a runs/lanes/b # rows of parallel processes (bench/row_merge.py)

A regime is a base config plus its arms, as data: ``configs/bench/<regime>/regime.yaml`` and one
``<arm>.yaml`` per arm (``base:`` the regime's config plus only the arm's keys; :mod:`bench.regimes`),
so data subset, class order and initialisation are the same for all arms of a seed (paired). Each run is a normal
run directory under ``--runs-dir`` (re-running resumes it; a finished run is only re-read), and its row is
written to ``bench/results/<regime>.md`` / ``.json`` as soon as it finishes, with the
per-arm statistics (mean ± std, 95% t interval over seeds), the paired differences
of ``Regime.pairs`` and a figure (``.png``) refreshed after every run.

Regimes: ``evidence`` (configs/bench/evidence/: a mixed-domain sequence of MNIST, Fashion-MNIST and
two CIFAR-100 groups built by bench/mixed_domains.py; why this regime: the docs' results page) and
``cifar100_first`` (configs/bench/cifar100_first/: the first regime, kept for reference).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from bench import mixed_domains
from bench.row_merge import (MergeError, add_clash_arguments, clash_mode, load_rows, merge_rows, merge_summary,
                             result_file, rows_path, save_rows)
from bench.regime_data import regime_extra
from bench.moe_arms import is_moe_arm, routing_fields, routing_lines, routing_pair_lines
from bench.regimes import REGIMES, REPO, Regime
from norga.files import atomic_write_bytes
from norga.reports.summary_stats import describe, difference_text, paired, table_head

STAT_COLUMNS = ("FA", "CA", "FM", "TIL_FA")


def mean_of(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else math.nan


def row_of(arm: str, seed: int, metrics: dict, minutes: float, threads: Optional[int] = None) -> dict:
    """One table row: accuracies as fractions; the diagnostics averaged over tasks (NaN without prompts; TII NaN
    for methods that infer no task id); ``minutes`` of training + evaluation with ``threads`` torch threads (None:
    not recorded, e.g. a row of a run finished by an earlier call)."""
    tii = metrics["tii_accuracy"]
    diag = (metrics.get("method") or {}).get("diagnostics") or []
    return {"run": arm, "seed": seed, "FA": metrics["FA"], "CA": metrics["CA"], "FM": metrics["FM"],
            "TIL_FA": metrics["til_FA"], "TII": sum(tii) / len(tii) if tii else math.nan,
            "probe_gain": mean_of(d["til_prompted_after_tap"] - d["til_frozen_probe"] for d in diag),
            "wtp_gain": mean_of(d["til_prompted_before_tap"] - d["til_frozen_probe"] for d in diag),
            "feat_trained": mean_of(d["feature_change_trained"] for d in diag),
            "feat_random": mean_of(d["feature_change_random"] for d in diag),
            "BWT": metrics.get("BWT"), "minutes": minutes, "threads": threads}


def _finished(run_dir: Path) -> bool:
    """True when the run folder already holds a complete run (its time was spent by an earlier call)."""
    path = run_dir / "metrics.json"
    return path.is_file() and json.loads(path.read_text()).get("status") == "complete"


def run_one(regime: Regime, arm: str, seed: int, args) -> dict:
    import torch
    from norga.engine import run_training

    cfg = regime.config(arm, args.quick, [f"seed={seed}", *args.extra])
    start = time.time()
    finished_before = _finished(args.runs_dir / f"{arm}_seed{seed}")
    metrics = run_training(cfg, args.runs_dir / f"{arm}_seed{seed}")
    if metrics.get("completed_tasks") != cfg.data.num_tasks:
        raise RuntimeError(f"run {arm} seed {seed} did not complete all tasks")
    minutes = sum(metrics["task_seconds"]) / 60  # training + evaluation of all tasks, also across resumes
    print(f"{arm} seed {seed}: FA {metrics['FA']:.4f} TIL_FA {metrics['til_FA']:.4f} "
          f"({(time.time() - start) / 60:.1f} min in this call)", flush=True)
    row = row_of(arm, seed, metrics, minutes, None if finished_before else torch.get_num_threads())
    if is_moe_arm(arm):
        row.update(routing_fields(args.runs_dir / f"{arm}_seed{seed}"))
    return row


# ---- results: rows, statistics, figure ---------------------------------------------------------------
ROW_COLUMNS = ("FA", "CA", "FM", "TIL_FA", "TII", "probe_gain", "wtp_gain", "feat_trained", "feat_random")
PERCENT = {"FA", "CA", "FM", "TIL_FA", "TII", "probe_gain", "wtp_gain"}


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{100 * v:.2f}" if key in PERCENT else f"{v:.3f}"


def rows_table(rows: List[dict]) -> List[str]:
    lines = ["| run | seed | " + " | ".join(ROW_COLUMNS) + " | minutes | threads |",
             "|---" * (len(ROW_COLUMNS) + 4) + "|"]
    for r in sorted(rows, key=lambda r: (r["seed"], r["run"])):
        lines.append(f"| {r['run']} | {r['seed']} | " + " | ".join(_cell(r, k) for k in ROW_COLUMNS)
                     + f" | {r['minutes']:.1f} | {r.get('threads') or '–'} |")
    return lines


def by_seed(rows: List[dict], arm: str, metric: str) -> Dict[int, float]:
    """{seed: value in %} of one arm (rows without the metric are skipped)."""
    return {r["seed"]: 100 * r[metric] for r in rows if r["run"] == arm and r.get(metric) is not None}


def statistics(rows: List[dict], regime: Regime) -> dict:
    """Per arm: describe() of each STAT_COLUMNS metric (in %); per pair: paired differences (points)."""
    arms = [a for a in regime.all_arms() if any(r["run"] == a for r in rows)]
    per_arm = {a: {m: describe(list(by_seed(rows, a, m).values())) for m in STAT_COLUMNS} for a in arms}
    pairs = {}
    for a, b in regime.pairs:
        if a in arms and b in arms and set(by_seed(rows, a, "FA")) & set(by_seed(rows, b, "FA")):
            pairs[f"{a} − {b}"] = {m: paired(by_seed(rows, a, m), by_seed(rows, b, m)) for m in STAT_COLUMNS}
    return {"arms": per_arm, "pairs": pairs}


DIAGNOSTICS = ("probe_gain", "wtp_gain", "feat_trained", "feat_random")


def diagnostics_lines(rows: List[dict], regime: Regime) -> List[str]:
    """Per prompted arm: mean [95% t interval] over seeds of each run's task-mean diagnostics."""
    lines = []
    for arm in regime.all_arms():
        values = {k: [r[k] for r in rows if r["run"] == arm and r.get(k) is not None and not math.isnan(r[k])]
                  for k in DIAGNOSTICS}
        if not values["probe_gain"]:
            continue
        cells = []
        for k, v in values.items():
            e, scale = describe(v), (100 if k in PERCENT else 1)
            digits = 2 if k in PERCENT else 3
            cells.append(f"{scale * e.mean:.{digits}f}" + ("" if e.n < 2 else
                         f" [{scale * e.low:.{digits}f}, {scale * e.high:.{digits}f}]"))
        lines.append(f"| {arm} | {len(values['probe_gain'])} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["Diagnostics, task means per run, then mean [95% t interval] over seeds (gains in points):", "",
            *table_head("arm", DIAGNOSTICS), *lines]


def arm_stat_row(arm: str, estimates: dict, columns=STAT_COLUMNS) -> str:
    """One table row of statistics()["arms"][arm]: mean ± std [95% interval] per column (the mean alone for one
    seed)."""
    cells = [f"{e.mean:.2f} ± {e.std:.2f} [{e.low:.2f}, {e.high:.2f}]" if e.n > 1 else f"{e.mean:.2f}"
             for e in (estimates[c] for c in columns)]
    return f"| {arm} | {estimates['FA'].n} | " + " | ".join(cells) + " |"


def pair_stat_row(name: str, per_metric: dict, columns=STAT_COLUMNS) -> str:
    """One table row of statistics()["pairs"][name]: the paired difference per column (difference_text)."""
    return f"| {name} | {len(per_metric['FA'][0])} | " + " | ".join(difference_text(per_metric[c][1])
                                                                   for c in columns) + " |"


def statistics_lines(stats: dict) -> List[str]:
    lines = ["Per arm: mean ± sample std over seeds, [95% Student-t interval of the mean] (%):", "",
             *table_head("arm", STAT_COLUMNS), *(arm_stat_row(a, est) for a, est in stats["arms"].items())]
    if stats["pairs"]:
        lines += ["", "Paired differences (percentage points; mean [95% t interval]; *resolved* = the interval "
                  "excludes 0):", "", *table_head("difference", STAT_COLUMNS),
                  *(pair_stat_row(name, per_metric) for name, per_metric in stats["pairs"].items())]
    return lines


class _Arm:
    """Adapter for norga.reports.plots.comparison_figure: an arm's rows as a group of runs (values in %)."""

    def __init__(self, name: str, rows: List[dict]):
        self.name, self.rows = name, [r for r in rows if r["run"] == name]
        self.runs = [self._Run(r) for r in self.rows]

    class _Run:
        def __init__(self, row):
            self.row = row

        def values(self):
            return {m: 100 * self.row[m] for m in ("FA", "TIL_FA")}

    def estimates(self):
        return {m: describe([r.values()[m] for r in self.runs]) for m in ("FA", "TIL_FA")}


def save_results(rows: List[dict], regime: Regime, stem: Path, header: str) -> None:
    """Write <stem>.json (rows), <stem>.md (rows + statistics) and <stem>.png atomically."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stats = statistics(rows, regime)
    text = "\n".join([header, "", *rows_table(rows), "", *statistics_lines(stats), "",
                      *diagnostics_lines(rows, regime), "", *routing_lines(rows), "", *routing_pair_lines(rows), ""])
    save_rows(stem, rows)
    atomic_write_bytes(result_file(stem, ".md"), text.encode())
    arms = [_Arm(a, rows) for a in regime.all_arms() if any(r["run"] == a for r in rows)]
    if arms:
        from norga.reports.plots import comparison_figure

        pair = next(iter(stats["pairs"].items()), None)
        pair_arg = None
        if pair is not None and all(e.n > 1 for _, e in pair[1].values()):
            a, b = pair[0].split(" − ")
            arms = [x for x in arms if x.name == a] + [x for x in arms if x.name == b] + \
                [x for x in arms if x.name not in (a, b)]
            pair_arg = (pair[1]["FA"][0], {m: pair[1][m][1] for m in ("FA", "TIL_FA")})
        comparison_figure(result_file(stem, ".png"), arms, ["FA", "TIL_FA"], pair_arg)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--regime", choices=sorted(REGIMES), default="evidence")
    p.add_argument("--only", nargs="+", default=None, help="arms to run (default: all arms of the regime)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the regime's)")
    p.add_argument("--quick", action="store_true",
                   help="tiny budget, every stage, the regime's first two seeds (< 2 minutes)")
    p.add_argument("--report", action="store_true", help="only rewrite the .md/.png from the rows in the .json")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="STEM",
                   help="merge the rows of these results stems (parallel processes' --results) into --results")
    add_clash_arguments(p)
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="folder with data/ and weights/")
    p.add_argument("--fashion-dir", type=Path, default=mixed_domains.FASHION_DIR, help="Fashion-MNIST idx files")
    p.add_argument("--data-dir", type=Path, default=REPO / "runs" / "bench_data", help="built data files")
    p.add_argument("--runs-dir", type=Path, default=None, help="run directories (default: runs/bench_<regime>)")
    p.add_argument("--results", type=Path, default=None, help="results path without suffix "
                   "(default: bench/results/<regime>[_quick]; cifar100_first keeps cifar100_cpu)")
    args = p.parse_args(argv)
    regime = REGIMES[args.regime]
    unknown = sorted(set(args.only or []) - set(regime.all_arms()))
    if unknown:
        p.error(f"unknown arm(s) {unknown} for regime {args.regime}; arms: {sorted(regime.arms)}, "
                f"optional (run only with --only): {sorted(regime.optional)}")
    args.on_clash = clash_mode(p, args)
    suffix = "_quick" if args.quick else ""
    args.runs_dir = args.runs_dir or REPO / "runs" / f"{regime.runs}{suffix}"
    args.results = args.results or REPO / "bench" / "results" / f"{regime.results}{suffix}"
    return args, regime


def header_of(regime: Regime, quick: bool) -> str:
    return (f"{regime.description}{' QUICK' if quick else ''}; the authors' training semantics "
            f"(docs/fidelity.md); accuracies in %, averages over "
            "tasks; probe_gain / wtp_gain = TIL of ψ on prompted features after / before TAP minus a linear "
            "probe on frozen features (mean over tasks, points); feat_trained / feat_random = relative feature "
            "change by the trained / a random prompt of the same norm; minutes = training + evaluation wall time "
            "of the run with `threads` torch threads (– = not recorded), a cost measure only on an idle machine.")


def merge(rows: List[dict], regime: Regime, args, header: str) -> int:
    """--merge: the lanes' rows into the results file (bench/row_merge.py), then its report."""
    try:
        merged, added, clashed = merge_rows(rows, [(str(s), load_rows(s)) for s in args.merge],
                                            regime.all_arms(), args.on_clash)
    except MergeError as err:
        sys.exit(f"error: {err}")
    save_results(merged, regime, args.results, header)
    print(f"{rows_path(args.results)}: {merge_summary(added, clashed, len(merged), args.on_clash)}")
    return 0


def main(argv=None) -> int:
    args, regime = parse_args(argv)
    header = header_of(regime, args.quick)
    rows = load_rows(args.results)
    if args.report:
        if not rows:
            sys.exit(f"error: no rows in {rows_path(args.results)}; run the benchmark first")
        save_results(rows, regime, args.results, header)
        print(result_file(args.results, ".md").read_text())
        return 0
    if args.merge:
        return merge(rows, regime, args, header)
    args.extra = regime_extra(regime, args)
    for seed in args.seeds or (regime.seeds[:2] if args.quick else regime.seeds):
        for arm in args.only or regime.arms:
            row = run_one(regime, arm, seed, args)
            rows = [r for r in rows if (r["run"], r["seed"]) != (arm, seed)] + [row]
            save_results(rows, regime, args.results, header)
    print("\n".join(statistics_lines(statistics(rows, regime))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
