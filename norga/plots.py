"""PNG figures of a run (rewritten after every task) and of a seed summary.

``write_run_plots(run_dir)`` reads ``metrics.json`` and ``epochs.jsonl`` and writes
into ``run_dir/plots/``:

====================== ======================================================================
``acc_matrix.png``     heatmaps of S[i, t] in %: class-incremental (CIL) and task-incremental
                       (TIL, true task id given); row i = task, column t = after task t
``average_acc.png``    A_t = mean_{i<=t} S[i, t] (CIL and TIL) and the mean TII accuracy
                       over tasks learned so far, in %, against t
``task_acc.png``       one curve per task i: S[i, t] against t (forgetting shows as a drop)
``tii_confusion.png``  after the last task: row = true task, column = task predicted by
                       the TII head, each row in % of that task's test samples
``loss.png``           per stage, the epoch losses (and other loss terms) of ``epochs.jsonl``
                       against the epoch counted over all tasks; skipped while it has no line
====================== ======================================================================

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas (never
pyplot: no GUI backend, no global state) and written atomically (temp file +
rename). A plot that fails emits a ``RuntimeWarning`` and the others are still
written: plotting never stops a run. ``comparison_figure`` is the figure of
``norga.summarize``.
"""
from __future__ import annotations

import io
import json
import logging
import math
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .files import atomic_write_bytes
from .toolkit.epochlog import read_epoch_log

PLOT_DIR = "plots"


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    """Render ``fig`` to PNG bytes and write them atomically to ``path``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)


def percent_matrix(rows: Optional[Sequence[Sequence[Optional[float]]]], done: int) -> np.ndarray:
    """Leading ``done`` x ``done`` block of a metrics.json matrix, in %, NaN where undefined."""
    rows = rows or []
    out = np.full((done, done), np.nan)
    for i, row in enumerate(rows[:done]):
        for t, v in enumerate(row[:done]):
            if v is not None:
                out[i, t] = 100.0 * float(v)
    return out


def running_average(S: np.ndarray) -> np.ndarray:
    """A_t = mean_{i<=t} S[i, t], shape (T,) (NaN entries ignored)."""
    return np.array([np.nanmean(S[: t + 1, t]) if np.isfinite(S[: t + 1, t]).any() else np.nan
                     for t in range(S.shape[0])])


def _heatmap(ax, S: np.ndarray, title: str) -> None:
    image = ax.imshow(np.ma.masked_invalid(S), vmin=0, vmax=100, cmap="viridis")
    T = S.shape[0]
    if T <= 12:
        for i in range(T):
            for t in range(T):
                if np.isfinite(S[i, t]):
                    ax.text(t, i, f"{S[i, t]:.0f}", ha="center", va="center", fontsize=8,
                            color="white" if S[i, t] < 60 else "black")
    ax.set_title(title)
    ax.set_xlabel("after learning task t")
    ax.set_ylabel("accuracy on task i")
    ax.set_xticks(range(T))
    ax.set_yticks(range(T))
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label="%")


def plot_acc_matrix(metrics: dict, records: List[dict]) -> Figure:
    done = metrics["completed_tasks"]
    fig = _figure(10, 4.4)
    left, right = fig.subplots(1, 2)
    _heatmap(left, percent_matrix(metrics["acc_matrix"], done), "class-incremental S[i, t] (%)")
    _heatmap(right, percent_matrix(metrics.get("til_acc_matrix"), done), "task-incremental (true task id) (%)")
    return fig


def plot_average_accuracy(metrics: dict, records: List[dict]) -> Figure:
    done = metrics["completed_tasks"]
    steps = np.arange(done)
    fig = _figure(6, 4)
    ax = fig.subplots()
    ax.plot(steps, running_average(percent_matrix(metrics["acc_matrix"], done)), "o-", label="A_t (CIL)")
    if metrics.get("til_acc_matrix"):
        ax.plot(steps, running_average(percent_matrix(metrics["til_acc_matrix"], done)), "s--",
                label="A_t (TIL, true task id)")
    if metrics.get("tii_acc_matrix"):
        ax.plot(steps, running_average(percent_matrix(metrics["tii_acc_matrix"], done)), "^:",
                label="TII accuracy (mean over tasks)")
    ax.set(xlabel="after learning task t", ylabel="%", title="average accuracy over tasks seen", ylim=(0, 101))
    ax.set_xticks(steps)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    return fig


def plot_task_curves(metrics: dict, records: List[dict]) -> Figure:
    done = metrics["completed_tasks"]
    S = percent_matrix(metrics["acc_matrix"], done)
    fig = _figure(6.5, 4)
    ax = fig.subplots()
    for i in range(done):
        ax.plot(np.arange(i, done), S[i, i:], "o-", markersize=3, label=f"task {i}")
    ax.set(xlabel="after learning task t", ylabel="accuracy on the task (%)", ylim=(0, 101),
           title="per-task accuracy (class-incremental)")
    ax.set_xticks(np.arange(done))
    ax.grid(alpha=0.3)
    if done <= 20:
        ax.legend(fontsize=7, ncol=max(1, done // 10), loc="lower left")
    return fig


def plot_tii_confusion(metrics: dict, records: List[dict]) -> Optional[Figure]:
    """Row-normalised confusion (true task x predicted task) after the last completed task; None if absent."""
    counts = metrics.get("tii_confusion")
    if not counts:
        return None
    C = np.asarray(counts, dtype=float)
    C = C[:, : len(C)]  # TII predicts only seen tasks: later columns are 0
    share = 100.0 * C / np.maximum(C.sum(axis=1, keepdims=True), 1.0)
    fig = _figure(5.5, 4.6)
    ax = fig.subplots()
    _heatmap(ax, share, "TII: true task vs predicted task (% of row)")
    ax.set_xlabel("predicted task")
    ax.set_ylabel("true task")
    return fig


NOT_LOSSES = ("stage", "task", "epoch", "elapsed", "time", "lr", "alpha", "tau", "steps")


def _stage_series(records: List[dict], stage: str) -> Dict[str, tuple]:
    """Loss terms of one stage -> (x = epoch counted over tasks, y, x where a new task starts).

    Loss terms = ``loss`` and every other float of the records except NOT_LOSSES (counts are ints).
    """
    rows = sorted((r for r in records if r.get("stage") == stage), key=lambda r: (r.get("task", 0), r.get("epoch", 0)))
    boundaries = [k for k in range(1, len(rows)) if rows[k].get("task") != rows[k - 1].get("task")]
    extra = {k for r in rows for k, v in r.items() if k not in NOT_LOSSES and isinstance(v, float)} - {"loss"}
    series = {}
    for key in ["loss"] + sorted(extra):
        points = [(x, float(r[key])) for x, r in enumerate(rows) if _is_number(r.get(key))]
        if points:
            series[key] = (np.array([p[0] for p in points]), np.array([p[1] for p in points]), boundaries)
    return series


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def plot_losses(metrics: dict, records: List[dict]) -> Optional[Figure]:
    """One panel per stage: epoch losses against the epoch counted over tasks; None without records."""
    stages = list(dict.fromkeys(r.get("stage") for r in records if _is_number(r.get("loss"))))
    if not stages:
        return None
    fig = _figure(4.2 * min(len(stages), 3), 3.4 * math.ceil(len(stages) / 3))
    axes = np.atleast_1d(fig.subplots(math.ceil(len(stages) / 3), min(len(stages), 3))).ravel()
    for ax, stage in zip(axes, stages):
        series = _stage_series(records, stage)
        for key, (x, y, bounds) in series.items():
            ax.plot(x, y, "-" if key == "loss" else "--", marker="." if len(x) < 60 else None, label=key)
        for b in next(iter(series.values()))[2] if series else []:
            ax.axvline(b - 0.5, color="0.5", linestyle=":", linewidth=1.0)
        ax.set(title=f"{stage}", xlabel="epoch, counted over tasks (dotted: next task)", ylabel="loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(stages):]:
        ax.set_visible(False)
    return fig


RUN_PLOTS: Dict[str, Callable[[dict, List[dict]], Optional[Figure]]] = {
    "acc_matrix.png": plot_acc_matrix,
    "average_acc.png": plot_average_accuracy,
    "task_acc.png": plot_task_curves,
    "tii_confusion.png": plot_tii_confusion,
    "loss.png": plot_losses,
}


def write_run_plots(run_dir: Path, metrics: Optional[dict] = None,
                    log: Optional[logging.Logger] = None) -> List[Path]:
    """Write every plot of RUN_PLOTS into ``run_dir/plots``; returns the files written.

    ``metrics`` defaults to ``run_dir/metrics.json``. Never raises: a failing
    plot (or unreadable input) becomes a RuntimeWarning (and a log line).
    """
    run_dir = Path(run_dir)
    written = []
    try:

        if metrics is None:
            metrics = json.loads((run_dir / "metrics.json").read_text())
        records = read_epoch_log(run_dir)
    except Exception as err:  # noqa: BLE001 - plotting must never stop a run
        _warn(f"plots of {run_dir} skipped: {err!r}", log)
        return written
    if not metrics.get("completed_tasks"):
        return written
    for name, make in RUN_PLOTS.items():
        try:
            fig = make(metrics, records)
            if fig is not None:
                written.append(save_png(fig, run_dir / PLOT_DIR / name))
        except Exception as err:  # noqa: BLE001
            _warn(f"plot {name} failed ({err!r}); the run goes on", log)
    return written


def _warn(message: str, log: Optional[logging.Logger]) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    if log is not None:
        log.warning(f"warning: {message}")


def comparison_figure(path: Path, groups, metrics: Sequence[str], pair=None) -> Path:
    """Groups side by side per metric: big dot = mean, error bar = 95% t interval, small dots = seeds (%).

    ``groups``: objects with ``name``, ``runs`` (each with ``values()`` -> {metric: %}) and
    ``estimates()`` -> {metric: Estimate}; ``pair`` = (seeds, {metric: Estimate}) adds a panel
    of paired differences (first group − second) with their 95% intervals.
    """
    ncols = 3
    nrows = math.ceil(len(metrics) / ncols) + (1 if pair else 0)
    fig = _figure(4 * ncols, 3.2 * nrows)
    grid = fig.add_gridspec(nrows, ncols)
    colors = [f"C{k}" for k in range(len(groups))]
    for m, metric in enumerate(metrics):
        ax = fig.add_subplot(grid[m // ncols, m % ncols])
        for k, g in enumerate(groups):
            e = g.estimates()[metric]
            err = None if math.isnan(e.low) else [[e.mean - e.low], [e.high - e.mean]]
            ax.errorbar(k, e.mean, yerr=err, fmt="o", color=colors[k], markersize=8, capsize=8, linewidth=2)
            dots = [r.values()[metric] for r in g.runs]
            ax.plot(np.full(len(dots), k + 0.2), dots, ".", color="0.3", markersize=6)
        ax.set_xlim(-0.5, len(groups) - 0.3)
        ax.set_xticks(range(len(groups)), [g.name for g in groups], rotation=10, fontsize=8)
        ax.set_title(f"{metric} (%)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("mean (large dot) with 95% t interval; small dots = single seeds")
    if pair:
        seeds, est = pair
        ax = fig.add_subplot(grid[nrows - 1, :])
        means = [est[m].mean for m in metrics]
        lows = [0 if math.isnan(est[m].low) else est[m].mean - est[m].low for m in metrics]
        highs = [0 if math.isnan(est[m].high) else est[m].high - est[m].mean for m in metrics]
        ax.errorbar(range(len(metrics)), means, yerr=[lows, highs], fmt="o", capsize=6)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(metrics)), list(metrics))
        ax.set_title(f"{groups[0].name} − {groups[1].name}, paired over seeds {seeds} (points, 95% CI)")
        ax.grid(axis="y", alpha=0.3)
    return save_png(fig, path)
