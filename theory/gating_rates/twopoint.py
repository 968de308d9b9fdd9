"""E2: Le Cam two-point test along the PDE direction (affine experts, one true atom).

H0 = G_* written as two atoms at ``b* +- c`` (``pde_path`` at delta = 0, the same
regression function as G_* for affine experts) and H1 = ``pde_path`` at
``delta_n = kappa n^{-1/4}``; the two differ in the over-specified cell's mean
slope ``sum_i w_i a_i / sum_i w_i`` by ``c delta_n ||v||``. Data: ``X ~ U([-1, 1]^2)``,
``Y = g(X) + N(0, sigma^2)``, n i.i.d. pairs.

The most powerful (Neyman-Pearson, i.e. exact likelihood-ratio) test of H0 vs
H1 at level ``alpha`` conditions on the inputs, which have the same law under
both hypotheses: with ``Delta_i = g1(X_i) - g0(X_i)`` and ``S = sum_i Delta_i^2``,

    log LR = sum_i [(Y_i - g0_i)^2 - (Y_i - g1_i)^2] / (2 sigma^2)
           ~ N(-S / (2 sigma^2), S / sigma^2) under H0,  N(+S / (2 sigma^2), S / sigma^2) under H1,

so it rejects when ``log LR > -S/(2 sigma^2) + z_{1-alpha} sqrt(S) / sigma`` (exact
level alpha for every X), and its power is ``Phi(sqrt(S)/sigma - z_{1-alpha})``.
Closed form: ``S ~ n ||Delta g||^2_{L2(mu)}``, so with ``KL_n = n ||Delta g||^2 / (2 sigma^2)``
(the KL divergence between the n-sample laws) the power is
``Phi(sqrt(2 KL_n) - z_{1-alpha})``. Monte Carlo: ``reps`` replications per n,
each drawing X and Y under H0 (level) and under H1 (power) and applying the test.
Prediction (``gating_rates_paths``): linear gate ``||Delta g|| ~ delta^2`` -> KL_n
constant in n (power constant); NoRGa ``||Delta g|| ~ delta`` -> KL_n ~ n^{1/2}
(power -> 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import torch
from scipy.stats import norm

from theory.gating_rates.model import make_gate, pretrained_sums, regression_fn, sample_inputs, \
    single_atom_truth
from theory.gating_rates.paths import DEFAULT_C, DEFAULT_V, Grid, mean_slope, pde_path

TWO_POINT_GATES = ("linear", "tanh", "sigmoid")


@dataclass
class TwoPointConfig:
    """E2 settings (saved in results.json)."""

    gates: Sequence[str] = TWO_POINT_GATES
    kappas: Sequence[float] = (0.03, 0.1, 1.0)
    ns_mc: Sequence[int] = (1000, 10000, 100000)
    ns_closed: Sequence[int] = tuple(int(10 ** k) for k in range(2, 10))
    reps: int = 300
    sigma: float = 0.01
    alpha: float = 0.05
    c: float = DEFAULT_C
    v: Sequence[float] = field(default=DEFAULT_V)
    log2_points: int = 16
    chunk: int = 2_000_000   # X points per Monte Carlo block
    seed: int = 0

    @classmethod
    def quick(cls) -> "TwoPointConfig":
        return cls(kappas=(1.0,), ns_mc=(2000,), ns_closed=(100, 2000, 10 ** 6), reps=300, log2_points=12)


def hypotheses(delta: float, cfg: TwoPointConfig, dim: int = 2):
    """``(H0, H1)`` measures, each ``(2, Q)``, for affine experts and ``delta``."""
    atom = single_atom_truth("affine").theta_star[0]
    d = torch.tensor([0.0, delta], dtype=torch.float64)
    both = pde_path(atom, d, dim, v=cfg.v, c=cfg.c)
    return both[0], both[1]


def closed_form(gate_name: str, kappa: float, ns: Sequence[int], cfg: TwoPointConfig,
                grid: Grid) -> Dict[str, List[float]]:
    """``||Delta g||``, ``KL_n`` and power for each n at ``delta_n = kappa n^{-1/4}``."""
    spec, gate = single_atom_truth("affine"), make_gate(gate_name)
    z = norm.ppf(1 - cfg.alpha)
    out: Dict[str, List[float]] = {"n": [int(n) for n in ns], "delta": [], "g_dist": [], "kl": [],
                                   "power": [], "mean_slope_gap": []}
    for n in ns:
        delta = kappa * n ** -0.25
        h0, h1 = hypotheses(delta, cfg, spec.dim)
        dist = float(grid.dist(h1.unsqueeze(0), h0, gate, spec)[0])
        kl = n * dist ** 2 / (2 * cfg.sigma ** 2)
        out["delta"].append(delta)
        out["g_dist"].append(dist)
        out["kl"].append(kl)
        out["power"].append(float(norm.cdf(math.sqrt(2 * kl) - z)))
        out["mean_slope_gap"].append(float((mean_slope(h1, spec.dim) - mean_slope(h0, spec.dim)).norm()))
    return out


def _lr_test(y: torch.Tensor, g0: torch.Tensor, g1: torch.Tensor, sigma: float, z: float) -> torch.Tensor:
    """Exact conditional LR test per replication: ``y, g0, g1 (R, n)`` -> reject ``(R,)`` bool."""
    llr = (((y - g0) ** 2 - (y - g1) ** 2).sum(1)) / (2 * sigma ** 2)
    S = ((g1 - g0) ** 2).sum(1)
    return llr > -S / (2 * sigma ** 2) + z * S.sqrt() / sigma


def monte_carlo(gate_name: str, kappa: float, n: int, cfg: TwoPointConfig, seed: int) -> Dict[str, float]:
    """Rejection rates of the exact LR test under H0 (level) and H1 (power), ``cfg.reps`` replications."""
    spec, gate = single_atom_truth("affine"), make_gate(gate_name)
    h0, h1 = hypotheses(kappa * n ** -0.25, cfg, spec.dim)
    z = norm.ppf(1 - cfg.alpha)
    gen = torch.Generator().manual_seed(seed)
    rej0 = rej1 = done = 0
    per_block = max(1, cfg.chunk // n)
    while done < cfg.reps:
        R = min(per_block, cfg.reps - done)
        X = sample_inputs(n, spec, gen, batch=R)                                   # (R, n, D)
        P0, Q0 = pretrained_sums(X, spec)
        g0 = regression_fn(X, P0, Q0, h0.expand(R, -1, -1), gate, spec.phi)        # (R, n)
        g1 = regression_fn(X, P0, Q0, h1.expand(R, -1, -1), gate, spec.phi)
        noise = torch.randn(2, R, n, generator=gen, dtype=torch.float64) * cfg.sigma
        rej0 += int(_lr_test(g0 + noise[0], g0, g1, cfg.sigma, z).sum())
        rej1 += int(_lr_test(g1 + noise[1], g0, g1, cfg.sigma, z).sum())
        done += R
    level, power = rej0 / cfg.reps, rej1 / cfg.reps
    se = lambda p: math.sqrt(max(p * (1 - p), 1e-12) / cfg.reps)  # noqa: E731
    return {"n": n, "level": level, "power": power, "level_se": se(level), "power_se": se(power),
            "reps": cfg.reps}


def run_two_point(cfg: TwoPointConfig, log=print) -> Dict[str, object]:
    """Closed form and Monte Carlo for every gate and kappa: ``{gate: {str(kappa): {...}}}``."""
    grid = Grid.make(single_atom_truth("affine"), cfg.log2_points, cfg.seed)
    out: Dict[str, object] = {}
    for gi, gate_name in enumerate(cfg.gates):
        out[gate_name] = {}
        for ki, kappa in enumerate(cfg.kappas):
            res = {"closed_form": closed_form(gate_name, kappa, cfg.ns_closed, cfg, grid),
                   "closed_form_at_mc_n": closed_form(gate_name, kappa, cfg.ns_mc, cfg, grid),
                   "monte_carlo": [monte_carlo(gate_name, kappa, int(n), cfg, cfg.seed * 1009 + 97 * gi
                                               + 31 * ki + i) for i, n in enumerate(cfg.ns_mc)]}
            out[gate_name][str(kappa)] = res
            mc = ", ".join(f"n={d['n']}: {d['power']:.3f} (cf {p:.3f}, level {d['level']:.3f})" for d, p in
                           zip(res["monte_carlo"], res["closed_form_at_mc_n"]["power"]))
            log(f"[two-point {gate_name:7s} kappa={kappa}] power {mc}")
    return out
