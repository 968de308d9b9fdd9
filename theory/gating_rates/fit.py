"""Batched least-squares fit (paper eq. 15 / eq. 22) inside a compact box Theta.

Every candidate measure of a batch ``B`` (replications x restarts) is fitted
at once by a batched Levenberg-Marquardt (damped Gauss-Newton) iteration with
a per-problem damping factor, in float64. The box constraint
``lo <= theta <= hi`` is enforced exactly by the bounded reparametrisation
``theta = lo + (hi - lo) * sigmoid(v)``; LM runs on the unconstrained ``v``.
The sum over samples is accumulated in chunks so that memory stays bounded for
``n = 10^5``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
from torch import Tensor

from norga.gates.modules import Gate
from theory.gating_rates.model import TruthSpec, regression_fn, regression_jacobian

CHUNK_ELEMENTS = 3_000_000  # doubles per (B, chunk, K*Q) Jacobian block


def default_box(dim: int, beta0: Tuple[float, float] = (-2.0, 2.0), coef: float = 2.5,
                b: Tuple[float, float] = (-2.5, 2.5)) -> Tuple[Tensor, Tensor]:
    """Compact parameter box Theta per atom ``[beta0, beta1 (D), a (D), b]``, each ``(Q,)``.

    beta0 in ``beta0`` (weights exp(beta0) bounded away from 0 and infinity);
    beta1, a in [-coef, coef]^D; b in ``b`` (for ``expert="poly"`` with even p
    use b > 0, which rules out the mirror atom (-a, -b) giving the same expert).
    """
    lo = torch.cat([torch.tensor([beta0[0]]), torch.full((2 * dim,), -coef), torch.tensor([b[0]])])
    hi = torch.cat([torch.tensor([beta0[1]]), torch.full((2 * dim,), coef), torch.tensor([b[1]])])
    if not bool((lo < hi).all()):
        raise ValueError(f"empty parameter box: lo={lo.tolist()} hi={hi.tolist()}")
    return lo.double(), hi.double()


def to_theta(v: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Bounded reparametrisation, any shape ``(..., Q)``."""
    return lo + (hi - lo) * torch.sigmoid(v)


def to_free(theta: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Inverse of :func:`to_theta` (theta must lie strictly inside the box)."""
    p = ((theta - lo) / (hi - lo)).clamp(1e-9, 1 - 1e-9)
    return torch.log(p) - torch.log1p(-p)


def init_atoms(spec: TruthSpec, n_atoms: int, n_restarts: int, scale: float,
               gen: torch.Generator, lo: Tensor, hi: Tensor) -> Tensor:
    """Starting measures ``(n_restarts, n_atoms, Q)`` scattered around G_*.

    Restart ``k`` puts one atom on each true atom and the surplus atoms on true
    atom ``(k + i) mod L``; copies share that atom's weight. Then every entry
    gets N(0, scale^2) noise and is clamped 2% inside the box.
    """
    L, Q = spec.theta_star.shape
    starts = []
    for k in range(n_restarts):
        owner = list(range(L)) + [(k + i) % L for i in range(n_atoms - L)]
        counts = torch.bincount(torch.tensor(owner), minlength=L).double()
        base = spec.theta_star[owner].clone()
        base[:, 0] -= torch.log(counts[owner])
        starts.append(base)
    theta0 = torch.stack(starts)
    theta0 = theta0 + scale * torch.randn(theta0.shape, generator=gen, dtype=torch.float64)
    margin = 0.02 * (hi - lo)
    return torch.maximum(torch.minimum(theta0, hi - margin), lo + margin)


def _chunks(n: int, batch: int, width: int):
    step = max(256, CHUNK_ELEMENTS // max(1, batch * width))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def sse(X: Tensor, y: Tensor, P0: Tensor, Q0: Tensor, theta: Tensor, gate: Gate, phi) -> Tensor:
    """Sum of squared residuals ``(B,)`` for ``X (B, n, D)``, ``y, P0, Q0 (B, n)``, ``theta (B, K, Q)``."""
    out = torch.zeros(X.shape[0], dtype=torch.float64)
    for s, e in _chunks(X.shape[1], X.shape[0], theta.shape[1] * theta.shape[2]):
        g = regression_fn(X[:, s:e], P0[:, s:e], Q0[:, s:e], theta, gate, phi)
        out += ((y[:, s:e] - g) ** 2).sum(1)
    return out


def normal_equations(X, y, P0, Q0, theta, gate, phi):
    """``J^T J (B, P, P)``, ``J^T r (B, P)`` and SSE ``(B,)`` with ``r = y - g``, P = K*Q."""
    B, K, Q = theta.shape
    JtJ = torch.zeros(B, K * Q, K * Q, dtype=torch.float64)
    Jtr = torch.zeros(B, K * Q, dtype=torch.float64)
    total = torch.zeros(B, dtype=torch.float64)
    for s, e in _chunks(X.shape[1], B, K * Q):
        g, J = regression_jacobian(X[:, s:e], P0[:, s:e], Q0[:, s:e], theta, gate, phi)
        r = y[:, s:e] - g
        JtJ += J.transpose(1, 2) @ J
        Jtr += (J * r.unsqueeze(-1)).sum(1)
        total += (r ** 2).sum(1)
    return JtJ, Jtr, total


@dataclass
class FitResult:
    """``theta (B, K, Q)``, ``sse (B,)``, ``converged (B,)`` bool, ``iterations (B,)``."""

    theta: Tensor
    sse: Tensor
    converged: Tensor
    iterations: Tensor


def fit_lm(X: Tensor, y: Tensor, P0: Tensor, Q0: Tensor, theta0: Tensor, lo: Tensor, hi: Tensor,
           gate: Gate, phi, max_iter: int = 150, rtol: float = 1e-10,
           atol: float = 0.0, max_tries: int = 12) -> FitResult:
    """Batched Levenberg-Marquardt on ``v`` with ``theta = to_theta(v)``.

    Shapes: ``X (B, n, D)``, ``y, P0, Q0 (B, n)``, ``theta0 (B, K, Q)``.
    A problem stops (``converged``) when an accepted step lowers its SSE by
    less than ``max(rtol * SSE, atol)``, or when no damping in ``max_tries`` increases
    lowers it (a stationary point up to round-off). Problems still moving after
    ``max_iter`` iterations are returned with ``converged = False``.
    """
    B, K, Q = theta0.shape
    v = to_free(theta0, lo, hi).clone()
    lam = torch.full((B,), 1e-3, dtype=torch.float64)
    cur = sse(X, y, P0, Q0, theta0, gate, phi)
    active = torch.ones(B, dtype=torch.bool)
    converged = torch.zeros(B, dtype=torch.bool)
    iters = torch.zeros(B, dtype=torch.long)
    for _ in range(max_iter):
        idx = active.nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        iters[idx] += 1
        Xa, ya, Pa, Qa, va = X[idx], y[idx], P0[idx], Q0[idx], v[idx]
        JtJ, Jtr, cur_a = normal_equations(Xa, ya, Pa, Qa, to_theta(va, lo, hi), gate, phi)
        dth = ((hi - lo) * torch.sigmoid(va) * torch.sigmoid(-va)).reshape(len(idx), K * Q)
        A = JtJ * dth.unsqueeze(2) * dth.unsqueeze(1)
        grad = Jtr * dth
        diag = torch.diagonal(A, dim1=1, dim2=2)
        diag = torch.maximum(diag, 1e-12 * diag.amax(1, keepdim=True) + 1e-300)
        pending = torch.ones(len(idx), dtype=torch.bool)
        lam_a = lam[idx].clone()
        new_v, new_sse = va.clone(), cur_a.clone()
        for _ in range(max_tries):
            p = pending.nonzero().squeeze(1)
            if p.numel() == 0:
                break
            M = A[p] + torch.diag_embed(lam_a[p].unsqueeze(1) * diag[p])
            step = torch.linalg.solve(M, grad[p].unsqueeze(-1)).squeeze(-1)
            trial = va[p] + step.reshape(len(p), K, Q)
            s_trial = sse(Xa[p], ya[p], Pa[p], Qa[p], to_theta(trial, lo, hi), gate, phi)
            ok = torch.isfinite(s_trial) & (s_trial < cur_a[p])
            new_v[p[ok]], new_sse[p[ok]] = trial[ok], s_trial[ok]
            lam_a[p[ok]] = (lam_a[p[ok]] / 5).clamp_min(1e-12)
            lam_a[p[~ok]] *= 5
            pending[p[ok]] = False
        stalled = pending
        done = stalled | ((cur_a - new_sse) < torch.clamp(rtol * cur_a, min=atol))
        v[idx], lam[idx], cur[idx] = new_v, lam_a.clamp_max(1e12), new_sse
        converged[idx[done]] = True
        active[idx[done]] = False
    theta = to_theta(v, lo, hi)
    return FitResult(theta, cur, converged, iters)


def split_moves(theta: Tensor) -> Tensor:
    """Data-driven restarts for over-specified fits: ``theta (R, K, Q)`` -> ``(R, K-1, K, Q)``.

    The lightest atom (smallest beta0) of each measure is dropped and replaced
    by a copy of one of the other ``K-1`` atoms, the two copies sharing that
    atom's weight (``g`` is unchanged by the copy). This lets the fit leave the
    local minima where a surplus atom sits at the weight floor of Theta.
    """
    R, K, _ = theta.shape
    light = theta[..., 0].argmin(1)                                  # (R,)
    out = theta.unsqueeze(1).repeat(1, K - 1, 1, 1)                  # (R, K-1, K, Q)
    half = torch.log(torch.tensor(2.0, dtype=theta.dtype))
    for r in range(R):
        others = [j for j in range(K) if j != int(light[r])]
        for c, j in enumerate(others):
            out[r, c, light[r]] = theta[r, j]
            out[r, c, light[r], 0] = theta[r, j, 0] - half
            out[r, c, j, 0] = theta[r, j, 0] - half
    return out
