"""The figure of ``norga summarize`` (and of the benchmarks' arm comparisons): groups side by side per metric."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

from .plot_scales import figure, save_png
from .summary_stats import clip_interval, metric_unit


def comparison_figure(path: Path, groups, metrics: Sequence[str], pair=None,
                      bounds: Optional[Mapping[str, Tuple[float, float]]] = None,
                      pair_bounds: Optional[Tuple[float, float]] = None) -> Path:
    """Groups side by side per metric: big dot = mean, error bar = 95% t interval, small dots = seeds (accuracies
    in %, FM and BWT in percentage points: each panel's title names its unit, :func:`metric_unit`).

    ``groups``: objects with ``name``, ``runs`` (each with ``values()`` -> {metric: value}) and
    ``estimates()`` -> {metric: Estimate}; ``pair`` = (seeds, {metric: Estimate}) adds a panel
    of paired differences (first group − second) with their 95% intervals. ``bounds`` (metric -> (low, high), in
    the metric's unit) and ``pair_bounds`` (points) clip the drawn intervals to what the metric can take, as the
    tables do.
    The y axes are matplotlib's autoscale, fitted to the dots and bars.
    """
    bounds = bounds or {}
    ncols = 3
    nrows = math.ceil(len(metrics) / ncols) + (1 if pair else 0)
    fig = figure(4 * ncols, 3.2 * nrows)
    grid = fig.add_gridspec(nrows, ncols)
    colors = [f"C{k}" for k in range(len(groups))]
    for m, metric in enumerate(metrics):
        ax = fig.add_subplot(grid[m // ncols, m % ncols])
        for k, g in enumerate(groups):
            e, _ = clip_interval(g.estimates()[metric], bounds.get(metric))
            err = None if math.isnan(e.low) else [[e.mean - e.low], [e.high - e.mean]]
            ax.errorbar(k, e.mean, yerr=err, fmt="o", color=colors[k], markersize=8, capsize=8, linewidth=2)
            dots = [r.values()[metric] for r in g.runs]
            ax.plot(np.full(len(dots), k + 0.2), dots, ".", color="0.3", markersize=6)
        ax.set_xlim(-0.5, len(groups) - 0.3)
        ax.set_xticks(range(len(groups)), [g.name for g in groups], rotation=10, fontsize=8)
        ax.set_title(f"{metric} ({metric_unit(metric)})")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("mean (large dot) with 95% t interval, clipped to the metric's range; small dots = single seeds")
    if pair:
        seeds, est = pair
        ax = fig.add_subplot(grid[nrows - 1, :])
        shown = [clip_interval(est[m], pair_bounds)[0] for m in metrics]
        means = [e.mean for e in shown]
        lows = [0 if math.isnan(e.low) else e.mean - e.low for e in shown]
        highs = [0 if math.isnan(e.high) else e.high - e.mean for e in shown]
        ax.errorbar(range(len(metrics)), means, yerr=[lows, highs], fmt="o", capsize=6)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(metrics)), list(metrics))
        ax.set_title(f"{groups[0].name} − {groups[1].name}, paired over seeds {seeds} (points, 95% CI)")
        ax.grid(axis="y", alpha=0.3)
    return save_png(fig, path)
