"""Where do Fig. 2's errors reach ~0? Sweep of the within-cluster gap x Gamma x M (issue 20).

    python -m theory.moe_cl.sweep --out DIR [--seeds 20] [--T 2000] [--quick]

"Theory on Mixture-of-Experts in Continual Learning" (Li et al.) assumes tasks of
one cluster differ by ||w_n - w_n'||_inf = O(sigma0^1.5) (Sec. 4.2) and varies the
termination threshold Gamma in {sigma0^0.75, sigma0, sigma0^1.25, sigma0^1.5}
(Appendix A.7). For every task layout of ``LAYOUTS`` (exact infinity-norm gaps,
the Fig. 2 default of ``moe_cl`` and A.2's generation as written, see
``moe_cl_synth``), every Gamma and M in {5, 10, 20}, Algorithm 1 runs with
termination on the same seeds (and, per layout and M, once without
termination; M = 1 is the single-expert baseline). Reported: G_T and F_T
(seed means), G_T / G_T(M = 1), the round the gate stopped, the measured
within-cluster gaps and G_T split into the rounds before the gate stopped,
later rounds routed to an expert of the task's cluster and later misrouted
rounds (:func:`decompose`). Writes DIR/sweep.json and DIR/sweep.png.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from theory.moe_cl.figures import positive_int
from theory.moe_cl.synth import SynthConfig, make_data, routing_noise, run_synthetic, within_cluster_gaps

SIGMA0 = SynthConfig().sigma0
GAMMA_EXPONENTS = (0.75, 1.0, 1.25, 1.5)
MS = (5, 10, 20)
TARGET = 0.2   # "almost zero": G_T below this fraction of the single expert's


def layouts(sigma0: float = SIGMA0) -> List[Tuple[str, Dict[str, object]]]:
    """(label, SynthConfig overrides) for every task layout of the sweep."""
    exact = [("gap 0", 0.0), ("gap s0^2", sigma0 ** 2), ("gap s0^1.5", sigma0 ** 1.5),
             ("gap s0^1.25", sigma0 ** 1.25), ("gap s0", sigma0)]
    out = [(label, {"gap": float(g)}) for label, g in exact]
    out.append(("Fig.2 default: N(0, s0^3) offsets", {}))
    out.append(("A.2 as written: i.i.d. tasks", {"independent": True}))
    return out


def decompose(errors: np.ndarray, experts: np.ndarray, clusters: np.ndarray, start: int) -> Dict[str, float]:
    """Split G_T = mean_tau E_tau(w_T^{(m_tau)}) of one run by round type; all arrays ``(T,)``.

    ``before``: rounds tau < ``start`` (0-based; the gate still trained); ``after_routed_ok`` /
    ``after_misrouted``: later rounds whose expert's majority cluster (over rounds
    >= start) is / is not the task's cluster. Each entry is a sum over its rounds / T,
    so the three add up to G_T. ``purity``: share of rounds >= start routed ok.
    """
    T = len(errors)
    late = np.arange(T) >= start
    owner = np.full(int(experts.max()) + 1, -1)
    for m in np.unique(experts[late]):
        owner[m] = np.bincount(clusters[late & (experts == m)]).argmax()
    ok = owner[experts] == clusters
    return {"before": float(errors[~late].sum() / T), "after_routed_ok": float(errors[late & ok].sum() / T),
            "after_misrouted": float(errors[late & ~ok].sum() / T),
            "purity": float(ok[late].mean()) if late.any() else float("nan")}


def final_errors(cfg: SynthConfig, data, noise, M: int, terminate: bool) -> Dict[str, object]:
    """Seed means of G_T and F_T, the mean stop round and G_T's :func:`decompose` for one setting.

    Without termination (or for a run whose gate never stopped) the split is at round T/2.
    """
    out = run_synthetic(cfg, data, noise, M, terminate)
    stops = out["stop_round"][out["stop_round"] >= 0]
    T = data.tasks.shape[1]
    parts = [decompose(out["final_round_errors"][b], out["experts"][b], data.tasks[b] % cfg.K,
                       int(s) - 1 if terminate and s >= 0 else T // 2) for b, s in enumerate(out["stop_round"])]
    return {"G_T": float(out["G"][:, -1].mean()), "F_T": float(out["F"][:, -1].mean()),
            "G_T_per_seed": out["G"][:, -1].tolist(),
            "G_T_split": {k: float(np.mean([p[k] for p in parts])) for k in parts[0]},
            "stop_round_mean": float(stops.mean()) if terminate and stops.size else None,
            "stopped_runs": int(stops.size) if terminate else None}


def sweep_layout(cfg: SynthConfig, seeds: Sequence[int], Ms: Sequence[int],
                 gammas: Dict[str, float]) -> Dict[str, object]:
    """Every M x Gamma (with termination), every M without, and M = 1, for one layout."""
    data = make_data(cfg, seeds)
    gaps = np.stack([within_cluster_gaps(W, cfg.K) for W in data.W])
    single = final_errors(cfg, data, routing_noise(cfg, seeds, 1), 1, False)
    res: Dict[str, object] = {"single_expert": single, "termination": {}, "no_termination": {},
                              "within_cluster_gap_inf_mean": float(gaps.mean()),
                              "within_cluster_gap_inf_max": float(gaps.max())}
    for M in Ms:
        noise = routing_noise(cfg, seeds, M)
        res["no_termination"][str(M)] = final_errors(cfg, data, noise, M, False)
        res["termination"][str(M)] = {}
        for label, gamma in gammas.items():
            r = final_errors(dataclasses.replace(cfg, gamma=gamma), data, noise, M, True)
            r["ratio_to_single"] = r["G_T"] / single["G_T"]
            res["termination"][str(M)][label] = r
    return res


def run_sweep(base: SynthConfig, seeds: Sequence[int], Ms: Sequence[int] = MS,
              gamma_exponents: Sequence[float] = GAMMA_EXPONENTS, log=print) -> Dict[str, object]:
    """The whole sweep: ``{"layouts": {label: sweep_layout(...)}, "gammas": {...}, "config": {...}}``."""
    gammas = {f"s0^{e:g}": base.sigma0 ** e for e in gamma_exponents}
    out: Dict[str, object] = {"gammas": gammas, "layouts": {}, "target_ratio": TARGET}
    for label, over in layouts(base.sigma0):
        t = time.time()
        res = sweep_layout(dataclasses.replace(base, **over), seeds, Ms, gammas)
        res["overrides"] = over
        out["layouts"][label] = res
        best = min((r["ratio_to_single"], M, g) for M, by_g in res["termination"].items()
                   for g, r in by_g.items())
        log(f"[{label:36s}] gap_inf={res['within_cluster_gap_inf_mean']:.3f}  "
            f"G_T(M=1)={res['single_expert']['G_T']:.3f}  best ratio {best[0]:.3f} "
            f"(M={best[1]}, Gamma={best[2]})  ({time.time() - t:.1f}s)")
    conf = dataclasses.asdict(base)
    conf.update(seeds=list(seeds), M=list(Ms), lam=base.lam)
    out["config"] = conf
    return out


SPLIT_PARTS = (("before", "rounds before the gate stopped"), ("after_routed_ok", "later, routed to its cluster"),
               ("after_misrouted", "later, misrouted"))


def plot_sweep(res: Dict[str, object], path: Path, split_gamma: str = "s0^1.25") -> None:
    """Row 1, one panel per M: G_T / G_T(M=1) per layout, a line per Gamma (crosses: no
    termination). Row 2: G_T split by round type (:func:`decompose`) at Gamma = ``split_gamma``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(res["layouts"])
    Ms = [str(M) for M in res["config"]["M"]]
    fig, axes = plt.subplots(2, len(Ms), figsize=(6 * len(Ms), 11), squeeze=False)
    x = np.arange(len(labels))
    split_gamma = split_gamma if split_gamma in res["gammas"] else next(iter(res["gammas"]))
    for col, M in enumerate(Ms):
        ax = axes[0, col]
        for g in res["gammas"]:
            y = [res["layouts"][lab]["termination"][M][g]["ratio_to_single"] for lab in labels]
            ax.plot(x, y, "o-", label=f"Gamma = {g.replace('s0', 'sigma0')}")
        y_off = [res["layouts"][lab]["no_termination"][M]["G_T"] / res["layouts"][lab]["single_expert"]["G_T"]
                 for lab in labels]
        ax.plot(x, y_off, "kx--", label="no termination")
        ax.axhline(res["target_ratio"], color="red", ls=":", label=f"{res['target_ratio']} x single expert")
        ax.set_yscale("log")
        ax.set_title(f"M = {M}: G_T / G_T(single expert)")
        ax = axes[1, col]
        bottom = np.zeros(len(labels))
        for key, name in SPLIT_PARTS:
            h = np.array([res["layouts"][lab]["termination"][M][split_gamma]["G_T_split"][key] for lab in labels])
            ax.bar(x, h, bottom=bottom, label=name)
            bottom += h
        ax.set_title(f"M = {M}: G_T split by round, Gamma = {split_gamma.replace('s0', 'sigma0')}")
        for a in axes[:, col]:
            a.set_xticks(x)
            a.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
            a.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    axes[1, 0].set_ylabel("contribution to G_T")
    fig.suptitle(f"Fig. 2 sweep: within-cluster gap x Gamma x M (T={res['config']['T']}, "
                 f"{len(res['config']['seeds'])} seeds, sigma0={res['config']['sigma0']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m theory.moe_cl.sweep", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output directory (created if absent)")
    p.add_argument("--seeds", type=positive_int, default=20, help="number of seeds (default 20)")
    p.add_argument("--T", type=positive_int, default=None, help="rounds per run (default 2000; --quick: 300)")
    p.add_argument("--quick", action="store_true", help="T = 300, 3 seeds, M in {5, 10}, two Gammas (tests)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> dict:
    """Run the sweep, write sweep.json and sweep.png; returns the results."""
    args = build_parser().parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        raise SystemExit(f"error: --out {args.out} exists and is not a directory")
    args.out.mkdir(parents=True, exist_ok=True)
    seeds, Ms, exps = list(range(args.seeds)), MS, GAMMA_EXPONENTS
    base = SynthConfig()
    if args.quick:
        base.T, seeds, Ms, exps = 300, seeds[:3], (5, 10), (1.0, 1.25)
    if args.T is not None:
        base.T = args.T
    t0 = time.time()
    res = run_sweep(base, seeds, Ms, exps)
    res["config"]["wall_time_s"] = round(time.time() - t0, 1)
    res["config"]["quick"] = bool(args.quick)
    (args.out / "sweep.json").write_text(json.dumps(res, indent=1))
    plot_sweep(res, args.out / "sweep.png")
    print(f"wrote {args.out / 'sweep.json'} in {res['config']['wall_time_s']} s")
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
