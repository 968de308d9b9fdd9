"""Plot and text table for :mod:`norga.theory.gating_rates` results."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

PANELS = (
    ("voronoi_eq17", "Voronoi loss eq. (17)", -0.5),
    ("voronoi_eq23_r1", "Voronoi loss eq. (23), r = 1", -0.25),
    ("voronoi_eq23_r2", "Voronoi loss eq. (23), r = 2", -0.5),
    ("param_exact", "param. error, exactly-specified cell", -0.5),
    ("param_over", "param. error, over-specified cell (w-RMS)", -0.25),
    ("regression_l2", r"$\|g_{\hat G}-g_{G_*}\|_{L_2(\mu)}$", -0.5),
)
COLORS = {"linear": "k", "tanh": "tab:blue", "sigmoid": "tab:orange", "gelu": "tab:green"}


def plot_rates(results: Dict[str, Dict[str, object]], path: Path) -> None:
    """Log-log mean loss vs n (bars: +- 1 s.e. over replications) for every gate.

    The dotted line in each panel is the NoRGa theory slope (Thm 4.1 / 4.3),
    anchored at the first tanh (else first gate) point.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    for ax, (metric, title, ref) in zip(axes.ravel(), PANELS):
        for gate, res in results.items():
            ns = np.asarray(res["n"], float)
            vals = [np.asarray(v, float) for v in res["values"][metric]]
            mean = np.array([np.nanmean(v) for v in vals])
            se = np.array([np.nanstd(v) / np.sqrt(max(1, np.isfinite(v).sum())) for v in vals])
            s = res["slopes"][metric]["slope"]
            ax.errorbar(ns, mean, yerr=se, marker="o", ms=3, capsize=2, color=COLORS.get(gate),
                        label=f"{gate} (slope {s:+.2f})")
        anchor = results.get("tanh", next(iter(results.values())))
        y0 = np.nanmean(anchor["values"][metric][0])
        n0 = np.asarray(anchor["n"], float)
        ax.plot(n0, y0 * (n0 / n0[0]) ** ref, ":", color="gray", label=f"n^{ref} (NoRGa theory)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("n")
        ax.legend(fontsize=7)
    fig.suptitle("Linear gating vs NoRGa: least-squares estimation error vs sample size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def slope_table(results: Dict[str, Dict[str, object]], key: str = "slopes") -> str:
    """Markdown table: slope [95% bootstrap CI] per gate and metric.

    ``key`` is ``"slopes"`` (slopes of per-n means) or ``"slopes_median"``.
    """
    metrics = [p[0] for p in PANELS]
    lines = ["| gate | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for gate, res in results.items():
        cells = []
        for m in metrics:
            s = res[key][m]
            cells.append(f"{s['slope']:+.2f} [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}]")
        lines.append(f"| {gate} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
