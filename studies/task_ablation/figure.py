"""WTP's training curves in the task-level ablation (issue #33): per regime, each level's cross-entropy and
regulariser per epoch, averaged over the seeds and tasks of its rows (``ce_curve`` / ``reg_curve``, one value per
WTP epoch). Levels train for different numbers of epochs (``epochs_x0.5`` / ``epochs_x2``), so the x axis is the
fraction of WTP done, (epoch + 1) / epochs. Written next to the report as ``<results>.png``.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np
from matplotlib.figure import Figure

from studies.task_ablation.grid import BASE, COMBINATION, LEVELS
from norga.reports.plot_scales import figure, save_png

TERMS = (("ce_curve", "cross-entropy"), ("reg_curve", "regulariser"))


def mean_curve(rows: List[dict], regime: str, level: str, key: str) -> Optional[np.ndarray]:
    """The mean per epoch of ``key`` over the (regime, level) rows that have it; None when none has. Curves
    of one level have one length (its epochs); a row with another length is an error, not averaged in."""
    curves = [r[key] for r in rows if r["regime"] == regime and r["level"] == level and r.get(key)]
    if not curves:
        return None
    if len({len(c) for c in curves}) != 1:
        raise ValueError(f"{regime} {level}: {key} of different lengths {sorted({len(c) for c in curves})}")
    return np.asarray(curves, dtype=float).mean(axis=0)


def curves_figure(rows: List[dict]) -> Optional[Figure]:
    """One row of axes per regime (CE | regulariser), one line per level; ``base`` thick and black."""
    regimes = sorted({r["regime"] for r in rows if r.get("ce_curve")})
    if not regimes:
        return None
    fig = figure(11, 3.2 * len(regimes))
    axes = fig.subplots(len(regimes), len(TERMS), squeeze=False)
    for i, regime in enumerate(regimes):
        for j, (key, name) in enumerate(TERMS):
            ax = axes[i][j]
            for level in [*LEVELS, COMBINATION]:
                curve = mean_curve(rows, regime, level, key)
                if curve is None:
                    continue
                x = (np.arange(len(curve)) + 1) / len(curve)
                style = dict(color="black", linewidth=2.2, zorder=3) if level == BASE else dict(linewidth=0.9)
                ax.plot(x, curve, label=level, **style)
            ax.set_title(f"{regime}: WTP {name}", fontsize=9)
            ax.set_xlabel("fraction of WTP's epochs")
            ax.set_ylabel(f"{name}, mean over seeds and tasks")
        axes[i][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def write_curves(rows: List[dict], path: Path) -> Optional[Path]:
    """Write the figure to ``path`` (PNG, atomically); None, and nothing written, while no row has a curve."""
    fig = curves_figure(rows)
    return None if fig is None else save_png(fig, path)
