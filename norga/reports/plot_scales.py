"""Figure plumbing and axis ranges fitted to the data, shared by the run plots and the summary figure.

``data_limits(values)`` -> (low, high) in the values' unit (% for every caller): the range of the finite
values, widened to at least ``min_span``, padded by ``margin`` of the span on each side and moved inside
``bounds`` without shrinking it. Matrices of 94–100 % then use the whole colour map instead of one yellow;
the scale is always shown (colour bar, axis ticks) and named "fitted to the data" in the label.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable, Optional, Tuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..outputs import Zone, write_output

PERCENT = (0.0, 100.0)


def figure(width: float, height: float) -> Figure:
    """A constrained-layout Figure on the Agg canvas (no pyplot, no GUI backend); size in inches at 100 dpi."""
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path, option: str = "--out", zone: Optional[Zone] = None) -> Path:
    """Render ``fig`` to PNG bytes and write them through the write guard (:func:`norga.outputs.write_output`) to
    ``path``; ``zone``: the norga folder (e.g. the run folder) the caller owns, ``option``: the option naming the
    place."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return write_output(Path(path), buffer.getvalue(), option, zone)


def data_limits(values: Iterable[float], margin: float = 0.05, min_span: float = 1.0,
                bounds: Tuple[float, float] = PERCENT) -> Tuple[float, float]:
    """(low, high) covering the finite ``values`` with ``margin`` × span on each side, at least ``min_span``
    wide and inside ``bounds`` (all in the values' unit); ``bounds`` itself when no value is finite."""
    v = np.asarray([float(x) for x in np.ravel(np.asarray(list(values), dtype=float))], dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float(bounds[0]), float(bounds[1])
    low, high = float(v.min()), float(v.max())
    if high - low < min_span:
        middle = (low + high) / 2
        low, high = middle - min_span / 2, middle + min_span / 2
    pad = margin * (high - low)
    low, high = low - pad, high + pad
    if low < bounds[0]:
        low, high = bounds[0], min(bounds[1], high + bounds[0] - low)
    if high > bounds[1]:
        low, high = max(bounds[0], low - (high - bounds[1])), bounds[1]
    return low, high


def scale_label(low: float, high: float) -> str:
    """The label of a fitted scale in %: '% (scale 93.4–100.0, fitted to the data)'."""
    return f"% (scale {low:.1f}–{high:.1f}, fitted to the data)"
