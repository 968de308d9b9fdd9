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
written: plotting never stops a run. ``comparison_figure`` (``norga.reports.plot_compare``) is the figure of
``norga.commands.summarize``.

Scales are fitted to the data (``norga.reports.plot_scales.data_limits``): the matrices' colour scale spans their
finite cells (a 94–100 % matrix is not one yellow block), cells are labelled to 0.1 %, and the curves'
y axes span their points; the colour bar or axis label names the range ("scale 93.4–100.0, fitted to the
data"), so a small spread is never read as a large one.
"""
from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure

from .plot_compare import comparison_figure  # noqa: F401 - the figure of norga.commands.summarize, importable from here
from ..outputs import Zone
from .plot_scales import data_limits, figure as _figure, save_png, scale_label
from ..toolkit.epochlog import read_epoch_log

PLOT_DIR = "plots"
CURVE_BOUNDS = (-1.0, 101.0)  # % : a curve's axis may pass 0 and 100 by a point so markers there stay whole


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
    """S in % on a colour scale fitted to its finite cells (colour bar shows the scale), labels to 0.1 %."""
    low, high = data_limits(S)
    image = ax.imshow(np.ma.masked_invalid(S), vmin=low, vmax=high, cmap="viridis")
    T = S.shape[0]
    if T <= 12:
        for i in range(T):
            for t in range(T):
                if np.isfinite(S[i, t]):
                    ax.text(t, i, f"{S[i, t]:.1f}", ha="center", va="center", fontsize=8 if T <= 6 else 6,
                            color="white" if S[i, t] < (low + high) / 2 else "black")
    ax.set_title(title)
    ax.set_xlabel("after learning task t")
    ax.set_ylabel("accuracy on task i")
    ax.set_xticks(range(T))
    ax.set_yticks(range(T))
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=scale_label(low, high))


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
    curves = [("acc_matrix", "o-", "A_t (CIL)"), ("til_acc_matrix", "s--", "A_t (TIL, true task id)"),
              ("tii_acc_matrix", "^:", "TII accuracy (mean over tasks)")]
    drawn = []
    for key, style, label in curves:
        if metrics.get(key):
            drawn.append(running_average(percent_matrix(metrics[key], done)))
            ax.plot(steps, drawn[-1], style, label=label)
    low, high = data_limits(np.concatenate(drawn), margin=0.1, min_span=2.0, bounds=CURVE_BOUNDS)
    ax.set(xlabel="after learning task t", ylabel=scale_label(low, high).replace("scale", "axis"),
           title="average accuracy over tasks seen", ylim=(low, high))
    ax.set_xticks(steps)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return fig


def plot_task_curves(metrics: dict, records: List[dict]) -> Figure:
    done = metrics["completed_tasks"]
    S = percent_matrix(metrics["acc_matrix"], done)
    fig = _figure(6.5, 4)
    ax = fig.subplots()
    for i in range(done):
        ax.plot(np.arange(i, done), S[i, i:], "o-", markersize=3, label=f"task {i}")
    low, high = data_limits(S, margin=0.1, min_span=2.0, bounds=CURVE_BOUNDS)
    ax.set(xlabel="after learning task t", ylim=(low, high),
           ylabel="accuracy on the task\n" + scale_label(low, high).replace("scale", "axis"),
           title="per-task accuracy (class-incremental)")
    ax.set_xticks(np.arange(done))
    ax.grid(alpha=0.3)
    if done <= 20:
        ax.legend(fontsize=7, ncol=max(1, done // 10), loc="best")
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
                written.append(save_png(fig, run_dir / PLOT_DIR / name, "--output-dir", Zone(run_dir)))
        except Exception as err:  # noqa: BLE001
            _warn(f"plot {name} failed ({err!r}); the run goes on", log)
    return written


def _warn(message: str, log: Optional[logging.Logger]) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    if log is not None:
        log.warning(f"warning: {message}")
