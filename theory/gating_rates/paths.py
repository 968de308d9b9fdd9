"""One-parameter families of mixing measures near G_* and L2(mu) distances along them.

Used by the identifiability table (E1, ``gating_rates_identifiability``) and the
two-point test (E2, ``gating_rates_twopoint``). The truth has one prefix atom
``atom = [beta0*, beta1* (D), a* (D), b*]`` (packed as in ``gating_rates_model``,
``Q = 2D + 2`` numbers, weight ``w* = exp(beta0*)``); every family replaces it by
two atoms, as a fit with L' = L + 1 atoms may, and is indexed by ``delta >= 0``:

* ``thm_a1``     — Thm A.1's construction: weights w*/2, shared beta1* and a*,
  intercepts ``b* +- delta``.
* ``rescale``    — (a_i, b_i) = c_i (a*, b*) with c = 1 +- delta and weights
  solving ``w1 + w2 = w*``, ``w1 c1^p + w2 c2^p = w*`` (p = the expert's degree of
  homogeneity; exact for ``(a^T X + b)^p``, affine (p = 1) and ReLU (p = 1)).
* ``beta_split`` — weights w*/2, ``beta1* +- delta v``, expert parameters unchanged.
* ``pde``        — weights w*/2, ``beta1* +- delta v``, ``b* +- c`` (c fixed),
  both slopes ``a* - c delta v``. At delta = 0 this is G_* "written as two atoms
  at b* +- c" (equal to G_* only for affine experts). Under the linear gate the
  first-order change cancels because ``d2F/(dbeta1_u db) = dF/da_u`` for
  ``F = exp(beta1^T X) phi(a^T X + b)``; a non-linear gate breaks that identity.

Distances are ``||g_path(delta) - g_path(0)||_{L2(mu)}`` with mu = U([-1, 1]^D),
estimated on a fixed scrambled Sobol point set (deterministic given the seed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Sequence

import numpy as np
import torch
from scipy.stats import qmc
from torch import Tensor

from norga.gates.modules import Gate
from theory.gating_rates.model import TruthSpec, pretrained_sums, regression_fn

PATH_NAMES = ("thm_a1", "rescale", "beta_split", "pde")
DEFAULT_V = (0.6, 0.8)   # unit direction in beta1-space
DEFAULT_C = 0.5          # fixed intercept split of the pde family


@dataclass
class Grid:
    """Quadrature for L2(mu): ``X (1, m, D)`` Sobol points and the pre-trained sums ``P0, Q0 (1, m)``."""

    X: Tensor
    P0: Tensor
    Q0: Tensor

    @classmethod
    def make(cls, spec: TruthSpec, log2_m: int = 16, seed: int = 0) -> "Grid":
        """``2**log2_m`` scrambled Sobol points mapped to [-x_range, x_range]^D."""
        pts = qmc.Sobol(d=spec.dim, scramble=True, seed=seed).random_base2(log2_m)
        X = torch.from_numpy((2.0 * pts - 1.0) * spec.x_range).unsqueeze(0)
        P0, Q0 = pretrained_sums(X, spec)
        return cls(X, P0, Q0)

    def g(self, theta: Tensor, gate: Gate, spec: TruthSpec) -> Tensor:
        """Regression function on the grid, ``theta (B, K, Q)`` -> ``(B, m)``."""
        B = theta.shape[0]
        return regression_fn(self.X.expand(B, -1, -1), self.P0.expand(B, -1), self.Q0.expand(B, -1),
                             theta, gate, spec.phi)

    def dist(self, theta: Tensor, ref: Tensor, gate: Gate, spec: TruthSpec) -> Tensor:
        """``||g_theta - g_ref||_{L2(mu)}`` for ``theta (B, K, Q)`` against one ``ref (K', Q)`` -> ``(B,)``."""
        g_ref = self.g(ref.unsqueeze(0), gate, spec)
        return ((self.g(theta, gate, spec) - g_ref) ** 2).mean(1).sqrt()


def _pair(atom: Tensor, n: int) -> Tensor:
    """``n`` copies of the truth written as two equal-weight atoms, ``(n, 2, Q)``."""
    rows = atom.expand(n, 2, -1).clone()
    rows[..., 0] -= math.log(2.0)
    return rows


def thm_a1_path(atom: Tensor, deltas: Tensor, dim: int, **_) -> Tensor:
    """Thm A.1 construction for each ``deltas (n,)`` -> ``(n, 2, Q)``."""
    out = _pair(atom, len(deltas))
    out[:, 0, -1] += deltas
    out[:, 1, -1] -= deltas
    return out


def rescale_path(atom: Tensor, deltas: Tensor, dim: int, power: int = 1, **_) -> Tensor:
    """Rescaled expert parameters ``c_i (a*, b*)`` with moment-matched weights, ``(n, 2, Q)``."""
    out = _pair(atom, len(deltas))
    c1, c2 = 1.0 + deltas, 1.0 - deltas
    w = math.exp(float(atom[0]))
    safe = torch.where(deltas > 0, deltas, torch.ones_like(deltas))
    w1 = w * (1.0 - (1.0 - safe) ** power) / ((1.0 + safe) ** power - (1.0 - safe) ** power)
    w1 = torch.where(deltas > 0, w1, torch.full_like(w1, w / 2))        # limit delta -> 0
    out[:, 0, 0], out[:, 1, 0] = torch.log(w1), torch.log(w - w1)
    out[:, 0, 1 + dim:] *= c1.unsqueeze(1)
    out[:, 1, 1 + dim:] *= c2.unsqueeze(1)
    return out


def beta_split_path(atom: Tensor, deltas: Tensor, dim: int, v: Sequence[float] = DEFAULT_V, **_) -> Tensor:
    """``beta1* +- delta v`` with everything else fixed, ``(n, 2, Q)``."""
    out = _pair(atom, len(deltas))
    step = deltas.unsqueeze(1) * torch.tensor(v, dtype=torch.float64)
    out[:, 0, 1:1 + dim] += step
    out[:, 1, 1:1 + dim] -= step
    return out


def pde_path(atom: Tensor, deltas: Tensor, dim: int, v: Sequence[float] = DEFAULT_V,
             c: float = DEFAULT_C, **_) -> Tensor:
    """``(beta1* +- delta v, a* - c delta v, b* +- c)``, weights w*/2, ``(n, 2, Q)``."""
    out = beta_split_path(atom, deltas, dim, v)
    vv = torch.tensor(v, dtype=torch.float64)
    out[:, :, 1 + dim:1 + 2 * dim] -= c * deltas.view(-1, 1, 1) * vv
    out[:, 0, -1] += c
    out[:, 1, -1] -= c
    return out


PATHS: Dict[str, Callable[..., Tensor]] = {"thm_a1": thm_a1_path, "rescale": rescale_path,
                                          "beta_split": beta_split_path, "pde": pde_path}


def path_distances(name: str, spec: TruthSpec, gate: Gate, grid: Grid, deltas: Sequence[float],
                   **kw) -> np.ndarray:
    """``||g_path(delta) - g_path(0)||_{L2(mu)}`` for each delta, ``(n,)`` numpy."""
    d = torch.tensor(list(deltas), dtype=torch.float64)
    atom = spec.theta_star[0]
    kw.setdefault("power", spec.homogeneity)
    thetas = PATHS[name](atom, d, spec.dim, **kw)
    ref = PATHS[name](atom, torch.zeros(1, dtype=torch.float64), spec.dim, **kw)[0]
    return grid.dist(thetas, ref, gate, spec).numpy()


def mean_slope(theta: Tensor, dim: int) -> Tensor:
    """Weight-averaged expert slope ``sum_i w_i a_i / sum_i w_i`` of a measure ``(..., K, Q)`` -> ``(..., D)``."""
    w = theta[..., 0].exp().unsqueeze(-1)
    return (w * theta[..., 1 + dim:1 + 2 * dim]).sum(-2) / w.sum(-2)
