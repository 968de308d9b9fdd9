"""Figure and text table for :mod:`theory.gating_rates.experiments` results.

``rates.png`` is a 3 x 4 grid: row 1 least squares with GELU experts, row 2
least squares with affine experts (E3), row 3 the identifiability paths and
omega(eps)/eps (E1) and the two-point test's power (E2). Panels of parts that
were not run say so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

LS_PANELS = {
    "gelu": (("voronoi_eq17", "eq. (17) loss", -0.5), ("param_exact", "exactly-specified params", -0.5),
             ("param_over", "over-specified params (w-RMS)", -0.25),
             ("regression_l2", r"$\|g_{\hat G}-g_{G_*}\|$", -0.5)),
    "affine": (("voronoi_eq17", "eq. (17) loss", None), ("voronoi_eq23_r1", "eq. (23) loss, r = 1", None),
               ("param_over", "over-specified params (w-RMS)", None),
               ("regression_l2", r"$\|g_{\hat G}-g_{G_*}\|$", -0.5)),
}
COLORS = {"linear": "k", "tanh": "tab:blue", "sigmoid": "tab:orange", "gelu": "tab:green"}
KAPPA_STYLES = ("-", "--", ":", "-.")


def _ls_panel(ax, results: Dict[str, Dict[str, object]], metric: str, title: str, ref) -> None:
    """Mean +- 1 s.e. over replications vs n for every gate; dotted reference slope ``ref``."""
    for gate, res in results.items():
        ns = np.asarray(res["n"], float)
        vals = [np.asarray(v, float) for v in res["values"][metric]]
        mean = np.array([np.nanmean(v) for v in vals])
        se = np.array([np.nanstd(v) / np.sqrt(max(1, np.isfinite(v).sum())) for v in vals])
        s = res["slopes"][metric]["slope"]
        ax.errorbar(ns, mean, yerr=se, marker="o", ms=3, capsize=2, color=COLORS.get(gate),
                    label=f"{gate} ({s:+.2f})")
    if ref is not None:
        anchor = next(iter(results.values()))
        n0 = np.asarray(anchor["n"], float)
        y0 = np.nanmean(anchor["values"][metric][0])
        ax.plot(n0, y0 * (n0 / n0[0]) ** ref, ":", color="gray", label=f"n^{ref}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("n")
    ax.legend(fontsize=6)


def _path_panel(ax, ident: Dict[str, object], expert: str, path: str, title: str) -> None:
    """||g_path(delta) - g_path(0)|| vs delta for every gate of one expert."""
    deltas = np.asarray(ident["deltas"], float)
    for gate, row in ident["pairs"].get(expert, {}).items():
        p = row["paths"][path]
        label = f"{gate} (" + ("= 0" if p["zero"] else f"slope {p['slope']:.2f}") + ")"
        ax.plot(deltas, np.maximum(p["g_dist"], 1e-17), "o-", ms=3, color=COLORS.get(gate), label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$\delta$")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6)


def _omega_panel(ax, ident: Dict[str, object]) -> None:
    """omega(eps)/eps vs eps per gate; the y range is [min / 3, 3 max] so flatness is visible."""
    vals = []
    for gate, rows in ident.get("omega", {}).items():
        eps = [r["eps"] for r in rows]
        vals += [r["ratio"] for r in rows]
        ax.plot(eps, [r["ratio"] for r in rows], "o-", ms=4, color=COLORS.get(gate), label=gate)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if vals:
        ax.set_ylim(min(vals) / 3, 3 * max(vals))
    ax.set_xlabel(r"$\varepsilon$ (eq. 17 loss)")
    ax.set_title(r"GELU experts: $\omega(\varepsilon)/\varepsilon$ (flat = Thm 4.3 bound holds)", fontsize=9)
    ax.legend(fontsize=6)


def _power_panel(ax, tp: Dict[str, object]) -> None:
    """Closed-form power (lines) and Monte Carlo power +- 2 s.e. (markers) vs n."""
    for gate, by_kappa in tp.items():
        for i, (kappa, res) in enumerate(by_kappa.items()):
            cf = res["closed_form"]
            ax.plot(cf["n"], cf["power"], KAPPA_STYLES[i % 4], color=COLORS.get(gate),
                    label=f"{gate}, kappa={kappa}")
            mc = res["monte_carlo"]
            ax.errorbar([d["n"] for d in mc], [d["power"] for d in mc], yerr=[2 * d["power_se"] for d in mc],
                        fmt="o", ms=3, color=COLORS.get(gate), capsize=2)
    ax.axhline(0.05, color="gray", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("n")
    ax.set_title(r"two-point test power, $\delta_n=\kappa n^{-1/4}$ (affine experts)", fontsize=9)
    ax.legend(fontsize=5, ncol=2, loc="lower right")


def _not_run(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not run", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def plot_all(results: Dict[str, object], path: Path) -> None:
    """Write the 3 x 4 figure described in the module docstring."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 4, figsize=(18, 12))
    ls = results.get("least_squares", {})
    for row, expert in enumerate(("gelu", "affine")):
        for ax, (metric, title, ref) in zip(axes[row], LS_PANELS[expert]):
            if expert in ls:
                _ls_panel(ax, ls[expert], metric, f"LS, {expert} experts: {title}", ref)
            else:
                _not_run(ax, f"least squares ({expert})")
    ident = results.get("identifiability")
    if ident:
        _path_panel(axes[2, 0], ident, "affine", "pde", "affine experts: PDE direction")
        _path_panel(axes[2, 1], ident, "gelu", "beta_split", r"GELU experts: pure $\beta_1$ split")
        _omega_panel(axes[2, 2], ident)
    else:
        for ax in axes[2, :3]:
            _not_run(ax, "identifiability")
    if results.get("two_point"):
        _power_panel(axes[2, 3], results["two_point"])
    else:
        _not_run(axes[2, 3], "two-point test")
    fig.suptitle("Linear gate vs NoRGa: least squares (rows 1-2), identifiability and two-point test (row 3)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def slope_table(results: Dict[str, Dict[str, object]], key: str = "slopes") -> str:
    """Markdown table: slope [95% bootstrap CI] per gate and metric.

    ``key`` is ``"slopes"`` (slopes of per-n means) or ``"slopes_median"``.
    """
    metrics = ("voronoi_eq17", "voronoi_eq23_r1", "voronoi_eq23_r2", "param_exact", "param_over",
               "regression_l2")
    lines = ["| gate | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for gate, res in results.items():
        cells = []
        for m in metrics:
            s = res[key][m]
            cells.append(f"{s['slope']:+.2f} [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}]")
        lines.append(f"| {gate} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
