"""Small statistics for seed aggregation: mean, sample std and Student-t interval.

``describe([48.1, 47.3, 48.9])`` -> :class:`Estimate` (n, mean, std, low, high) where
std is the sample standard deviation (ddof = 1) and [low, high] the two-sided
confidence interval of the mean, mean ± t_{(1+c)/2, n-1} · std / √n (scipy.stats.t).
With one value, std and the interval are NaN. ``paired(a, b)`` describes the
differences a[s] − b[s] over the seeds s common to both mappings.
Units are whatever the inputs are in (the summaries use percentage points).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import numpy as np


@dataclass(frozen=True)
class Estimate:
    n: int
    mean: float
    std: float  # sample standard deviation (ddof = 1); NaN if n < 2
    low: float  # lower end of the confidence interval of the mean; NaN if n < 2
    high: float
    confidence: float = 0.95


def describe(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Mean, sample std and t interval of ``values`` (1-D, at least one finite value)."""
    x = np.asarray([float(v) for v in values], dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("describe() needs at least one value")
    mean = float(x.mean())
    if len(x) < 2:
        return Estimate(1, mean, math.nan, math.nan, math.nan, confidence)
    std = float(x.std(ddof=1))
    from scipy import stats  # here: SciPy costs a second of start-up to commands that never need it

    half = float(stats.t.ppf(0.5 + confidence / 2, df=len(x) - 1)) * std / math.sqrt(len(x))
    return Estimate(len(x), mean, std, mean - half, mean + half, confidence)


def paired(a: Mapping[Hashable, float], b: Mapping[Hashable, float],
           confidence: float = 0.95) -> Tuple[List[Hashable], Estimate]:
    """Differences a[s] - b[s] over the common keys (seeds), sorted; raises if none is common."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("no common seed between the two groups: paired differences need matching seeds")
    return common, describe([a[s] - b[s] for s in common], confidence)


def clip_interval(e: Estimate, bounds: Optional[Tuple[float, float]]) -> Tuple[Estimate, bool]:
    """(``e`` with its interval clipped to ``bounds``, whether it was clipped). The t interval assumes normal
    values, so with few seeds it can reach past what the metric can take (an accuracy above 100 %); the
    clipped interval is what the data allow. Mean and std are kept; ``bounds`` None or no interval: unchanged."""
    if bounds is None or math.isnan(e.low):
        return e, False
    low, high = max(e.low, bounds[0]), min(e.high, bounds[1])
    return replace(e, low=low, high=high), (low, high) != (e.low, e.high)


# What each metric can take, in % (points): the t interval assumes normal values and with few seeds it can reach
# past these (FA 99 and 100 over 2 seeds: [93.2, 105.8]); norga summarize's tables, CSV and figure show it clipped,
# with a note. Keys are norga.engine.summary_runs.METRICS.
BOUNDS: Dict[str, Tuple[float, float]] = {"FA": (0.0, 100.0), "CA": (0.0, 100.0), "TIL FA": (0.0, 100.0),
                                          "TII acc": (0.0, 100.0), "FM": (-100.0, 100.0), "BWT": (-100.0, 100.0)}
DIFFERENCE_BOUNDS = (-100.0, 100.0)  # a paired difference of two percentages
POINT_METRICS = ("FM", "BWT")  # differences of two accuracies: in percentage points, not %


def metric_unit(metric: str) -> str:
    """The unit a metric's values are in: "points" for FM and BWT (differences of accuracies), else "%"."""
    return "points" if metric in POINT_METRICS else "%"
CLIPPED = "†"


def shown_interval(e: Estimate, metric: str, difference: bool = False) -> Tuple[Estimate, bool]:
    """The estimate with its interval clipped to what ``metric`` (or a difference) can take, and whether it was."""
    return clip_interval(e, DIFFERENCE_BOUNDS if difference else BOUNDS.get(metric))


def clip_note(clipped: Dict[str, Tuple[Estimate, Estimate]], difference: bool = False) -> str:
    """The footnote of a table whose intervals were clipped: each metric's t interval and why it was clipped."""
    what = "a difference of two percentages lies in [−100, 100]" if difference else \
        "accuracies lie in [0, 100] %, FM and BWT in [−100, 100] points"
    raw = "; ".join(f"{k} [{e.low:.2f}, {e.high:.2f}]" for k, (e, _) in clipped.items())
    return (f"{CLIPPED} clipped: the Student-t interval assumes normally distributed values and with few seeds "
            f"reaches past what the metric can take ({what}); unclipped: {raw}.")


def sign_of(e: Estimate) -> int:
    """+1 / -1 when the interval lies above / below 0, 0 when it includes 0 (or there is none)."""
    return 1 if e.low > 0 else -1 if e.high < 0 else 0


def difference_text(e: Estimate, mark_resolved: bool = True) -> str:
    """A paired difference as "+m [+low, +high]", marked " *resolved*" when the interval excludes 0 (unless
    ``mark_resolved`` is False, for prose that says so itself); "–" for one value (no interval)."""
    if e.n < 2:
        return "–"
    resolved = mark_resolved and sign_of(e) != 0
    return f"{e.mean:+.2f} [{e.low:+.2f}, {e.high:+.2f}]" + (" *resolved*" if resolved else "")


def table_head(first: str, columns: Sequence[str]) -> List[str]:
    """The two header lines of a markdown table: ``| first | seeds | <columns> |`` and its rule."""
    return [f"| {first} | seeds | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
