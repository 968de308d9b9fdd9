"""Reproduce Figures 2 and 5 of "Theory on Mixture-of-Experts in Continual Learning".

    python -m theory.moe_cl.figures --figure 2 --out DIR [--seeds 20] [--quick]
    python -m theory.moe_cl.figures --figure 5 --out DIR [--mnist PATH] [--epochs 150] [--quick]

Writes DIR/figure<k>.png (forgetting F_t and generalization error G_t over t
for every M, with and without termination of the gate update) and
DIR/results.json shaped {"termination": {"<M>": {...}}, "no_termination":
{"<M>": {...}}, "config": {...}}. Mechanics live in ``moe_cl_core``; the
synthetic data in ``moe_cl_synth``; the MNIST/CNN variant in ``moe_cl_mnist``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from theory.moe_cl.core import summarize
from theory.moe_cl.synth import SynthConfig, make_data, routing_noise, run_synthetic

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MNIST = REPO_ROOT.parent / "shared" / "data" / "mnist.npz"
MODES = ("termination", "no_termination")


def routing_stats(experts: np.ndarray, clusters: np.ndarray, start: int) -> dict:
    """Routing quality over rounds start..T-1 (0-based) of one run.

    experts, clusters (T,) int. purity = share of those rounds whose expert's
    majority cluster is the task's cluster; balance = mean over clusters of
    min/max load among the experts taking >= 5% of that cluster's tasks.
    """
    ex, cl = experts[start:], clusters[start:]
    if len(ex) == 0:
        return {"purity": None, "balance": None, "experts_per_cluster": None}
    K, M = int(clusters.max()) + 1, int(experts.max()) + 1
    tab = np.zeros((K, M), dtype=int)
    np.add.at(tab, (cl, ex), 1)
    purity = float(tab.max(axis=0).sum() / tab.sum())
    ratios, sizes = [], []
    for k in range(K):
        if tab[k].sum() == 0:
            continue
        used = tab[k][tab[k] >= 0.05 * tab[k].sum()]
        ratios.append(float(used.min() / used.max()))
        sizes.append(int(len(used)))
    return {"purity": purity, "balance": float(np.mean(ratios)), "experts_per_cluster": float(np.mean(sizes))}


def aggregate(runs: List[dict], clusters: Sequence[np.ndarray], terminate: bool) -> dict:
    """results.json entry for one (M, mode): seed means + routing stats after the gate stopped
    (without termination: over the second half of the rounds)."""
    F = np.stack([r["F"] for r in runs])
    G = np.stack([r["G"] for r in runs])
    stops = np.array([int(r["stop_round"]) for r in runs]) if terminate else None
    out = summarize(F, G, stops)
    T = F.shape[1]
    stats = []
    for r, c in zip(runs, clusters):
        start = int(r["stop_round"]) if terminate and r["stop_round"] >= 0 else (T // 2 if not terminate else T)
        stats.append(routing_stats(r["experts"], c, start))
    for key in ("purity", "balance", "experts_per_cluster"):
        vals = [s[key] for s in stats if s[key] is not None]
        out[f"routing_{key}_after_stop"] = float(np.mean(vals)) if vals else None
    out["T1"] = int(runs[0]["T1"])
    return out


def split_synthetic(out: Dict[str, np.ndarray]) -> List[dict]:
    """Batched run output (B, ...) -> list of per-seed dicts."""
    B = out["F"].shape[0]
    return [dict(F=out["F"][b], G=out["G"][b], experts=out["experts"][b],
                 stop_round=out["stop_round"][b], T1=out["T1"]) for b in range(B)]


def plot_curves(curves: dict, Ms: Sequence[int], path: Path, title: str, stops: Optional[dict] = None) -> None:
    """2x2 panels like the paper's Fig. 2: rows F_t, G_t; columns with / without termination.

    curves[mode][M] = (F (S, T), G (S, T)); mean over seeds with a +-1 std band.
    stops[M] = mean round at which the gate stopped (dotted line).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True, sharey="row")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, mode in enumerate(MODES):
        for row, (idx, name) in enumerate(((0, "forgetting $F_t$"), (1, "generalization error $G_t$"))):
            ax = axes[row, col]
            for i, M in enumerate(Ms):
                arr = curves[mode][M][idx]
                t = np.arange(1, arr.shape[1] + 1)
                mean, std = arr.mean(axis=0), arr.std(axis=0)
                ax.plot(t, mean, color=colors[i], label=f"M = {M}" + (" (single expert)" if M == 1 else ""))
                if arr.shape[0] > 1:
                    ax.fill_between(t, mean - std, mean + std, color=colors[i], alpha=0.15)
                if stops and mode == "termination" and M > 1 and stops.get(M) is not None:
                    ax.axvline(stops[M], color=colors[i], ls=":", lw=1)
            ax.set_title(f"{name}, {'with' if mode == 'termination' else 'without'} termination")
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("round t")
    axes[0, 0].legend(loc="upper right")
    fig.suptitle(title + "  (dotted: mean round at which gate training stopped)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure2(args) -> dict:
    """Appendix A.2 runs for every M and both modes (vectorised over seeds)."""
    cfg = SynthConfig(cluster_std=args.cluster_std, gamma=args.gamma)
    Ms = [1, 5, 10, 20]
    seeds = list(range(args.seeds))
    if args.quick:
        cfg.T, seeds = 300, seeds[:4]
    data = make_data(cfg, seeds)
    clusters = [data.tasks[b] % cfg.K for b in range(len(seeds))]
    results: dict = {m: {} for m in MODES}
    curves: dict = {m: {} for m in MODES}
    stops = {}
    for M in Ms:
        noise = routing_noise(cfg, seeds, M)
        for mode in MODES:
            runs = split_synthetic(run_synthetic(cfg, data, noise, M, mode == "termination"))
            results[mode][str(M)] = aggregate(runs, clusters, mode == "termination")
            curves[mode][M] = (np.stack([r["F"] for r in runs]), np.stack([r["G"] for r in runs]))
        stops[M] = results["termination"][str(M)].get("gate_stop_round_mean")
    conf = dataclasses.asdict(cfg)
    conf.update(gamma=cfg.resolved_gamma(), cluster_std=cfg.resolved_cluster_std(), seeds=seeds, M=Ms)
    results["config"] = conf
    plot_curves(curves, Ms, args.out / "figure2.png",
                f"Fig. 2 reproduction: N={cfg.N}, K={cfg.K}, T={cfg.T}, {len(seeds)} seeds", stops)
    return results


def figure5(args) -> dict:
    """Appendix A.4 runs (CNN experts on MNIST digits 1/4/7)."""
    from theory.moe_cl.mnist import DIGITS, MnistConfig, load_mnist, run_figure5

    data = load_mnist(args.mnist)
    cfg = MnistConfig(epochs=args.epochs)
    Ms = [1, 4, 7]
    seeds = list(range(args.seeds))
    if args.quick:
        cfg.T, cfg.epochs, cfg.n_test, Ms, seeds = 8, min(cfg.epochs, 15), 100, [1, 3], seeds[:1]
    runs = run_figure5(data, cfg, Ms, seeds)
    results: dict = {m: {} for m in MODES}
    curves: dict = {m: {} for m in MODES}
    digit_index = {d: i for i, d in enumerate(DIGITS)}  # digit -> cluster
    for mode in MODES:
        for M in Ms:
            rs = runs[mode][M]
            clusters = [np.array([digit_index[d] for d in r["digits"]]) for r in rs]
            results[mode][str(M)] = aggregate(rs, clusters, mode == "termination")
            curves[mode][M] = (np.stack([r["F"] for r in rs]), np.stack([r["G"] for r in rs]))
    conf = dataclasses.asdict(cfg)
    conf.update(seeds=seeds, M=Ms, mnist=str(args.mnist), paper_epochs=600)
    results["config"] = conf
    stops = {M: results["termination"][str(M)].get("gate_stop_round_mean") for M in Ms}
    plot_curves(curves, Ms, args.out / "figure5.png",
                f"Fig. 5 reproduction (MNIST 1/4/7): T={cfg.T}, {cfg.epochs} epochs/task, {len(seeds)} seed(s)", stops)
    return results


def _positive(kind: type):
    """argparse type: a finite ``kind`` (int or float) > 0."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {value}")
        return value
    return parse


positive_int, positive_float = _positive(int), _positive(float)


def build_parser() -> argparse.ArgumentParser:
    """CLI definition."""
    p = argparse.ArgumentParser(prog="python -m theory.moe_cl.figures", description=__doc__.split("\n")[0])
    p.add_argument("--figure", type=int, choices=(2, 5), required=True, help="2: synthetic (A.2); 5: MNIST (A.4)")
    p.add_argument("--out", type=Path, required=True, help="output directory (created if absent)")
    p.add_argument("--quick", action="store_true", help="tiny run (< 1 min) for tests")
    p.add_argument("--seeds", type=positive_int, default=None,
                   help="number of seeds (default 20 for fig 2, 1 for fig 5)")
    p.add_argument("--mnist", type=Path, default=DEFAULT_MNIST, help=f"MNIST .npz (default {DEFAULT_MNIST})")
    p.add_argument("--epochs", type=positive_int, default=150,
                   help="fig 5: full-batch SGD epochs per task (paper: 600)")
    p.add_argument("--cluster-std", type=positive_float, default=None,
                   help="fig 2: per-entry std of a task's offset from its cluster centre (default sigma0^1.5)")
    p.add_argument("--gamma", type=positive_float, default=None,
                   help="fig 2: termination threshold (default sigma0^1.25)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> dict:
    """Run one figure, write results.json and the PNG; returns the results dict."""
    import torch

    torch.set_num_threads(1)
    args = build_parser().parse_args(argv)
    if args.seeds is None:
        args.seeds = 20 if args.figure == 2 else 1
    if args.out.exists() and not args.out.is_dir():
        raise SystemExit(f"error: --out {args.out} exists and is not a directory")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results = figure2(args) if args.figure == 2 else figure5(args)
    results["config"]["wall_time_s"] = round(time.time() - t0, 1)
    results["config"]["quick"] = bool(args.quick)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    for mode in MODES:
        for M, r in results[mode].items():
            print(f"{mode:>15} M={M:>2}: F_T={r['final_forgetting']:.4f} G_T={r['final_generalization_error']:.4f} "
                  f"stop={r.get('gate_stop_round_mean')} purity={r['routing_purity_after_stop']}")
    print(f"wrote {args.out / 'results.json'} in {results['config']['wall_time_s']} s")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
