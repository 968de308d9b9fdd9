"""Continual-learning metrics on the accuracy matrix (paper Appendix D).

``S[i, t]`` is the accuracy on task i after learning task t (0-based here),
fractions in [0, 1]; entries with t < i are undefined (NaN). All averages are
over **tasks, not samples**, as in the paper:

* FA  = mean_i S[i, T-1]                        (final average accuracy)
* CA  = mean_t A_t,  A_t = mean_{i<=t} S[i, t]    (cumulative average accuracy)
* FM  = mean_{i<T-1} max_{t<T-1} (S[i, t] - S[i, T-1])   (forgetting, as the paper defines it)
* FM_official = mean_{i<T-1} (max_{t<=T-1} S[i, t] - S[i, T-1])   (the authors' code: the
  max includes the last column, so a task that improves at the end counts 0, never < 0)
* BWT = mean_{i<T-1} (S[i, T-1] - S[i, i])        (backward transfer)
* FGT_coda = 1/(T-1) sum_{t>=1} 1/t sum_{i<t} (S[i, t-1] - S[i, t])   (the official
  CODA-Prompt code's forgetting, its ``utils/calc_forgetting.py``: the mean one-step
  drop; can be negative). Not part of :func:`summarize` (not in ``metrics.json``);
  the cross-check with CODA-Prompt reports it.

Each metric is a small function of the (upper-triangular) matrix; a run
with fewer finished tasks is scored on its leading square block.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np


def as_matrix(rows: Sequence[Sequence[Optional[float]]]) -> np.ndarray:
    """List of rows (None where undefined) -> float matrix with NaN; checks it is square."""
    S = np.array([[np.nan if v is None else float(v) for v in row] for row in rows], dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"accuracy matrix must be square (tasks x tasks), got shape {S.shape}")
    lower = np.tril_indices(S.shape[0], k=0)
    if np.isnan(S[lower[1], lower[0]]).any():  # S[i, t] for t >= i must be defined
        raise ValueError("accuracy matrix has missing entries S[i, t] with t >= i")
    return S


def average_accuracies(S: np.ndarray) -> np.ndarray:
    """A_t = mean_{i<=t} S[i, t] for every t, shape (T,)."""
    return np.array([S[: t + 1, t].mean() for t in range(S.shape[0])])


def final_average_accuracy(S: np.ndarray) -> float:
    return float(S[:, -1].mean())


def cumulative_average_accuracy(S: np.ndarray) -> float:
    return float(average_accuracies(S).mean())


def forgetting(S: np.ndarray) -> float:
    """FM; 0.0 when only one task has been learned."""
    T = S.shape[0]
    if T < 2:
        return 0.0
    drops = [np.nanmax(S[i, : T - 1]) - S[i, T - 1] for i in range(T - 1)]
    return float(np.mean(drops))


def forgetting_official(S: np.ndarray) -> float:
    """FM as the authors' code computes it (max over every column, the last included); 0.0 for one task."""
    T = S.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([np.nanmax(S[i, :]) - S[i, T - 1] for i in range(T - 1)]))


def backward_transfer(S: np.ndarray) -> float:
    T = S.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([S[i, T - 1] - S[i, i] for i in range(T - 1)]))


def forgetting_coda(S: np.ndarray) -> float:
    """FGT_coda (see the module docstring); 0.0 for one task."""
    T = S.shape[0]
    if T < 2:
        return 0.0
    return float(np.mean([np.mean(S[:t, t - 1] - S[:t, t]) for t in range(1, T)]))


def summarize(rows: Sequence[Sequence[Optional[float]]]) -> Dict[str, float]:
    """All scalar metrics of an accuracy matrix given as rows (None = undefined)."""
    S = as_matrix(rows)
    return {
        "FA": final_average_accuracy(S),
        "CA": cumulative_average_accuracy(S),
        "FM": forgetting(S),
        "FM_official": forgetting_official(S),
        "BWT": backward_transfer(S),
    }


def empty_matrix(num_tasks: int) -> List[List[Optional[float]]]:
    return [[None] * num_tasks for _ in range(num_tasks)]
