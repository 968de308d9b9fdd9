"""Voronoi losses between mixing measures (paper eqs. 17, 18, 23) and rate fits.

A measure is given by weights ``w (K,)`` (= exp(beta0)) and atoms ``(K, 2D+1)``
packed as ``[beta1 (D), a (D), b]``; ``eta = (a, b)`` is the expert parameter.
All functions here work on one measure at a time with numpy float64 arrays.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np


def split_packed(theta: np.ndarray):
    """``theta (K, 2D+2)`` packed ``[beta0, beta1, a, b]`` -> ``w (K,)``, ``atoms (K, 2D+1)``."""
    theta = np.asarray(theta, dtype=np.float64)
    return np.exp(theta[:, 0]), theta[:, 1:]


def voronoi_cells(atoms: np.ndarray, true_atoms: np.ndarray) -> List[np.ndarray]:
    """Eq. (18): cell j = fitted atoms whose nearest true atom is j (ties -> lowest j).

    ``atoms (K, M)``, ``true_atoms (L, M)``; returns L index arrays.
    """
    dist = np.linalg.norm(atoms[:, None, :] - true_atoms[None, :, :], axis=-1)  # (K, L)
    owner = dist.argmin(1)
    return [np.flatnonzero(owner == j) for j in range(true_atoms.shape[0])]


def _parts(delta: np.ndarray, dim: int):
    """Split atom differences ``(m, 2D+1)`` into beta1 ``(m, D)``, a ``(m, D)``, b ``(m,)``."""
    return delta[:, :dim], delta[:, dim:2 * dim], delta[:, 2 * dim]


def _cell_terms(w, atoms, w_star, atoms_star, dim: int):
    """Yield, for each true atom j: (|mass of cell j - w_j*|, w[cell] (m,), d_beta1 (m, D), d_a (m, D), d_b (m,))."""
    for j, cell in enumerate(voronoi_cells(atoms, atoms_star)):
        d_beta, d_a, d_b = _parts(atoms[cell] - atoms_star[j], dim)
        yield abs(w[cell].sum() - w_star[j]), w[cell], d_beta, d_a, d_b


def loss_eq17(w, atoms, w_star, atoms_star, dim: int) -> float:
    """L_1(G, G_*) of eq. (17): squared distances in over-specified cells,
    plain distances in exactly-specified cells, plus the cell-mass mismatch."""
    total = 0.0
    for mismatch, wc, d_beta, d_a, d_b in _cell_terms(w, atoms, w_star, atoms_star, dim):
        n_beta = np.linalg.norm(d_beta, axis=1)
        n_eta = np.sqrt((d_a ** 2).sum(1) + d_b ** 2)
        power = 2 if wc.size > 1 else 1
        total += mismatch + float((wc * (n_beta ** power + n_eta ** power)).sum())
    return float(total)


def loss_eq23(w, atoms, w_star, atoms_star, dim: int, r: float) -> float:
    """L_{2,r}(G, G_*) of eq. (23): mass mismatch + sum_i w_i (|dbeta1|^r + |da|^r + |db|^r)."""
    total = 0.0
    for mismatch, wc, d_beta, d_a, d_b in _cell_terms(w, atoms, w_star, atoms_star, dim):
        terms = np.linalg.norm(d_beta, axis=1) ** r + np.linalg.norm(d_a, axis=1) ** r + np.abs(d_b) ** r
        total += mismatch + float((wc * terms).sum())
    return float(total)


def parameter_errors(w, atoms, w_star, atoms_star) -> Dict[str, float]:
    """Parameter errors split by cell type (the rates of Thm 4.3 (i)-(ii)).

    ``exact``: mean over exactly-specified cells of ||omega_i - omega_j*||
    (theory: n^-1/2 for NoRGa). ``over``: mean over over-specified cells of the
    weight-averaged RMS distance sqrt(sum_i w_i ||.||^2 / sum_i w_i)
    (theory: n^-1/4 for NoRGa). NaN when no cell of that type exists.
    """
    exact, over = [], []
    for j, cell in enumerate(voronoi_cells(atoms, atoms_star)):
        if cell.size == 0:
            continue
        d2 = ((atoms[cell] - atoms_star[j]) ** 2).sum(1)
        if cell.size == 1:
            exact.append(float(np.sqrt(d2[0])))
        else:
            over.append(float(np.sqrt((w[cell] * d2).sum() / w[cell].sum())))
    return {"param_exact": float(np.mean(exact)) if exact else float("nan"),
            "param_over": float(np.mean(over)) if over else float("nan")}


def all_losses(theta_fit: np.ndarray, theta_star: np.ndarray, dim: int) -> Dict[str, float]:
    """Every reported loss for one fitted ``(K, Q)`` against the true ``(L, Q)`` measure."""
    w, atoms = split_packed(theta_fit)
    ws, atoms_s = split_packed(theta_star)
    out = {"voronoi_eq17": loss_eq17(w, atoms, ws, atoms_s, dim),
           "voronoi_eq23_r1": loss_eq23(w, atoms, ws, atoms_s, dim, 1.0),
           "voronoi_eq23_r2": loss_eq23(w, atoms, ws, atoms_s, dim, 2.0)}
    out.update(parameter_errors(w, atoms, ws, atoms_s))
    out["cell_sizes"] = [int(c.size) for c in voronoi_cells(atoms, atoms_s)]
    return out


def loglog_slope(ns: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(values) against log(ns) (NaN if < 2 finite points)."""
    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(values, float))
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(x[keep], y[keep], 1)[0])


def bootstrap_slope(ns: Sequence[float], per_n: Sequence[Sequence[float]], n_boot: int = 2000,
                    seed: int = 0, level: float = 0.95, stat: str = "mean") -> Dict[str, object]:
    """Slope of the per-n ``stat`` (mean or median) vs n, with a percentile bootstrap interval.

    ``per_n[i]`` holds the replication values at ``ns[i]`` (non-finite values are
    dropped, and counted by the caller). Each bootstrap draw resamples the
    replications within every n, recomputes the per-n statistic and refits the slope.
    """
    if stat not in ("mean", "median"):
        raise ValueError(f"stat must be 'mean' or 'median', got {stat!r}")
    reduce = np.mean if stat == "mean" else np.median
    rng = np.random.default_rng(seed)
    clean = [np.asarray(v, float)[np.isfinite(np.asarray(v, float))] for v in per_n]
    point = [reduce(c) if c.size else np.nan for c in clean]
    slope = loglog_slope(ns, point)
    draws = np.empty(n_boot)
    for b in range(n_boot):
        boot = [reduce(rng.choice(c, size=c.size)) if c.size else np.nan for c in clean]
        draws[b] = loglog_slope(ns, boot)
    lo, hi = np.nanpercentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return {"slope": slope, "ci": [float(lo), float(hi)]}
