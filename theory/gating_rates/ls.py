"""E3: least-squares estimation rates (paper eq. 15 / 22), per gate and sample size.

Setup (one row of one head, eq. 14 / eq. 21), and why:

* Input ``X in R^{Nd}`` with N = 2 pre-trained experts and d = 1 (D = Nd = 2),
  ``X ~ Uniform([-1, 1]^2)`` (the theory needs a bounded input space).
* Pre-trained part: quadratic gates ``X^T B0_j X + c0_j`` and experts
  ``h(X, eta0_j)``, all known (fixed numbers in ``default_truth``).
* Experts ``h(X, (a, b)) = phi(a^T X + b)`` for every expert, ``phi`` from
  ``Config.expert``: ``"gelu"`` (default; one of the paper's examples after
  Def. 4.2) or ``"affine"`` (``a^T X + b``, Thm A.1 with p = 1; the construction
  of Thm A.1 then gives ``g_G = g_G*`` exactly for every gate, so the
  over-specified cell is not identifiable). ``"poly"`` and ``"relu"`` exist too.
* Truth: L = 2 prefix atoms, weights exp(beta0*) = 1,
  beta1* = (1.5, .5), (-1, 1.5); a* = (1.5, -1), (.5, 1.5); b* = 0, .3, so that
  beta1^T X spans about [-2.5, 2.5] (tanh / GELU clearly non-linear there; the
  sigmoid's slope varies least) and a^T X + b covers GELU's curved region.
  Fitted: L' = 3 atoms (over-specified by one), so one true atom is fitted by
  two atoms and one by a single atom.
* alpha = tau = 1 (the package's gate initial values) are *known* constants:
  in eq. (14) they sit outside the mixing measure G_*, and Theorems 4.1/4.3 are
  about estimating (beta0, beta1, eta) only, so the fit keeps them fixed at the
  true values (the gate objects are frozen).
* Noise N(0, 0.01^2) (only n / noise^2 matters for the rates). Compact Theta:
  beta0 in [-2, 2], beta1, a in [-2.5, 2.5]^2, b in [-2.5, 2.5], enforced exactly
  by a sigmoid reparametrisation (``gating_rates_fit``).
* Least squares by batched Levenberg-Marquardt in float64.
  Stage 1: ``restarts`` = 8 starts per replication scattered around G_*
  (N(0, 0.5^2) on every parameter; surplus atom next to true atom k mod L) fitted
  on <= 1000 samples; stage 2: the best stage-1 fit and its "split moves"
  (lightest atom moved onto each other atom) refitted on all n samples; the
  result with the smallest training SSE is kept (never chosen by a loss that
  uses G_*). A fit "fails the certificate" if its SSE exceeds that of G_*
  itself (G_* is in G_L'(Theta) by splitting an atom); such fits, and LM runs
  that hit ``max_iter``, are counted in results.json, never dropped.
* Losses: eq. (17) L_1, eq. (23) L_{2,r} for r = 1, 2, parameter errors of
  exactly- and over-specified cells, and ||g_hat - g_*||_{L2(mu)} on 20000 fresh
  samples; log-log slopes of the per-n means (and medians) vs n with bootstrap
  intervals over replications.
* Sample sizes 100 ... 100000 (7 values, 12 replications each); the data of
  replication r at size n are the same for every gate (common random numbers),
  seeded from ``seed``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from theory.gating_rates.fit import default_box, fit_lm, init_atoms, split_moves, sse
from theory.gating_rates.loss import all_losses, bootstrap_slope
from theory.gating_rates.model import (GATE_NAMES, default_truth, embed_truth, make_gate,
                                       pretrained_sums, regression_fn, sample_inputs)

METRICS = ("voronoi_eq17", "voronoi_eq23_r1", "voronoi_eq23_r2", "param_exact", "param_over",
           "regression_l2")
DEFAULT_NS = (100, 316, 1000, 3162, 10000, 31623, 100000)
QUICK_NS = (100, 300, 1000)


@dataclass
class Config:
    """Everything that defines a run (saved to ``setup.json``)."""

    gates: Sequence[str] = GATE_NAMES
    ns: Sequence[int] = DEFAULT_NS
    reps: int = 12
    restarts: int = 8    # stage-1 starts per replication (on <= n_pilot samples)
    refine: int = 1      # best stage-1 results refitted on all n samples (+ split moves)
    n_pilot: int = 1000
    n_atoms: int = 3
    noise: float = 0.01
    expert: str = "gelu"
    power: int = 2  # only used by expert = "poly"
    x_range: float = 1.0
    alpha: float = 1.0
    tau: float = 1.0
    init_scale: float = 0.5
    box_beta0: Tuple[float, float] = (-2.0, 2.0)
    box_coef: float = 2.5
    box_b: Tuple[float, float] = (-2.5, 2.5)
    max_iter: int = 200
    sse_tol: float = 1e-4  # stop when an LM step lowers SSE by < sse_tol * noise^2
    n_eval: int = 20000
    n_boot: int = 2000
    seed: int = 0

    def box(self):
        """The compact parameter box Theta as ``(lo, hi)``, each ``(2D+2,)``."""
        return default_box(self.spec().dim, self.box_beta0, self.box_coef, self.box_b)

    def spec(self):
        """The ground truth (:class:`TruthSpec`) this config simulates from."""
        return default_truth(self.power, self.x_range, self.expert)

    @classmethod
    def quick(cls, **kw) -> "Config":
        base = dict(ns=QUICK_NS, reps=3, restarts=4, n_pilot=300, max_iter=60, n_eval=5000,
                    n_boot=200)
        base.update(kw)
        return cls(**base)


def _fit_batch(X, y, P0, Q0, theta0, gate, phi, cfg: Config):
    """Fit ``K`` starts per replication: ``X (R, n, D)``, ``y, P0, Q0 (R, n)``, ``theta0 (R, K, L', Q)``.

    Returns ``theta (R, K, L', Q)``, ``sse (R, K)``, ``converged (R, K)``, ``iterations (R, K)``.
    """
    R, K = theta0.shape[:2]
    lo, hi = cfg.box()
    rep = lambda t: t.repeat_interleave(K, 0)  # noqa: E731  (R, ...) -> (R*K, ...)
    fit = fit_lm(rep(X), rep(y), rep(P0), rep(Q0), theta0.reshape(R * K, *theta0.shape[2:]), lo, hi,
                 gate, phi, max_iter=cfg.max_iter, atol=cfg.sse_tol * cfg.noise ** 2)
    return (fit.theta.reshape(theta0.shape), fit.sse.reshape(R, K), fit.converged.reshape(R, K),
            fit.iterations.reshape(R, K))


def multistart_fit(X, y, P0, Q0, gate, phi, cfg: Config, gen: torch.Generator):
    """Least-squares estimate per replication, shapes as in :func:`_fit_batch`.

    Stage 1 fits ``cfg.restarts`` starts on the first ``min(n, cfg.n_pilot)``
    samples (an i.i.d. subsample). Stage 2 refits on all ``n`` samples the
    ``cfg.refine`` best stage-1 results plus the :func:`split_moves` of the best
    one (surplus atom moved onto each other atom). The estimate is the stage-2
    result with the smallest full-data SSE. Returns ``theta (R, L', Q)``,
    ``sse (R,)``, ``converged (R,)`` and a dict of counts.
    """
    spec = cfg.spec()
    lo, hi = cfg.box()
    R, n = y.shape
    theta0 = torch.stack([init_atoms(spec, cfg.n_atoms, cfg.restarts, cfg.init_scale, gen, lo, hi)
                          for _ in range(R)])                                   # (R, K1, L', Q)
    m = min(n, cfg.n_pilot)
    theta, sse_k, _, _ = _fit_batch(X[:, :m], y[:, :m], P0[:, :m], Q0[:, :m], theta0, gate, phi, cfg)
    order = sse_k.argsort(1)
    top = theta[torch.arange(R).unsqueeze(1), order[:, :cfg.refine]]             # (R, K2, L', Q)
    moves = split_moves(theta[torch.arange(R), order[:, 0]])                     # (R, L'-1, L', Q)
    start = torch.cat([top, moves], 1).clamp(lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))
    theta, sse_k, conv, iters = _fit_batch(X, y, P0, Q0, start, gate, phi, cfg)
    best = sse_k.argmin(1)
    pick = torch.arange(R)
    info = {"restarts_not_converged": int((~conv).sum()),
            "mean_iterations": float(iters.double().mean())}
    return theta[pick, best], sse_k[pick, best], conv[pick, best], info


def simulate_one_n(gate_name: str, n: int, n_index: int, cfg: Config) -> Dict[str, object]:
    """Fit ``cfg.reps`` replications at sample size ``n`` for one gate.

    Returns per-replication metric lists (length ``reps``) and failure counts.
    """
    spec = cfg.spec()
    gate = make_gate(gate_name, cfg.alpha, cfg.tau)
    R, L = cfg.reps, spec.theta_star.shape[0]
    gen = torch.Generator().manual_seed(cfg.seed * 100003 + n_index)
    X = sample_inputs(n, spec, gen, batch=R)                                    # (R, n, D)
    eps = torch.randn(R, n, generator=gen, dtype=torch.float64) * cfg.noise     # (R, n)
    P0, Q0 = pretrained_sums(X, spec)                                           # (R, n)
    y = regression_fn(X, P0, Q0, spec.theta_star.expand(R, L, -1), gate, spec.phi) + eps
    theta_best, sse_best, conv_best, info = multistart_fit(X, y, P0, Q0, gate, spec.phi, cfg, gen)
    truth_emb = embed_truth(spec, cfg.n_atoms).expand(R, -1, -1)
    sse_true = sse(X, y, P0, Q0, truth_emb, gate, spec.phi)
    cert_fail = sse_best > sse_true * (1 + 1e-9)
    reg = regression_error(theta_best, gate, cfg)
    out: Dict[str, object] = {m: [] for m in METRICS}
    out["cell_sizes"] = []
    for r in range(R):
        losses = all_losses(theta_best[r].numpy(), spec.theta_star.numpy(), spec.dim)
        for m in METRICS[:-1]:
            out[m].append(losses[m])
        out["cell_sizes"].append(losses["cell_sizes"])
    out["regression_l2"] = reg.tolist()
    out["not_converged"] = int((~conv_best).sum())
    out["certificate_failures"] = int(cert_fail.sum())
    out["certificate_failed_reps"] = cert_fail.nonzero().squeeze(1).tolist()
    out.update(info)
    out["non_finite"] = int(sum(not math.isfinite(v) for m in METRICS for v in out[m]))
    return out


def regression_error(theta: torch.Tensor, gate, cfg: Config) -> torch.Tensor:
    """``||g_theta - g_*||_{L2(mu)}`` per fit, ``theta (R, L', Q)`` -> ``(R,)``.

    Estimated on ``cfg.n_eval`` fresh inputs drawn with their own seed.
    """
    spec = cfg.spec()
    gen = torch.Generator().manual_seed(cfg.seed * 100003 + 99991)
    Xe = sample_inputs(cfg.n_eval, spec, gen, batch=1)
    P0, Q0 = pretrained_sums(Xe, spec)
    g_star = regression_fn(Xe, P0, Q0, spec.theta_star.unsqueeze(0), gate, spec.phi)
    R = theta.shape[0]
    g_hat = regression_fn(Xe.expand(R, -1, -1), P0.expand(R, -1), Q0.expand(R, -1), theta, gate,
                          spec.phi)
    return ((g_hat - g_star) ** 2).mean(1).sqrt()


def summarise_gate(per_n: List[Dict[str, object]], cfg: Config) -> Dict[str, object]:
    """Per-n means/medians, slopes with bootstrap CIs and failure counts for one gate."""
    ns = list(cfg.ns)
    res: Dict[str, object] = {"n": ns, "voronoi_loss": "eq17 (L_1)"}
    res["mean"] = {m: [float(np.nanmean(d[m])) for d in per_n] for m in METRICS}
    res["median"] = {m: [float(np.nanmedian(d[m])) for d in per_n] for m in METRICS}
    res["values"] = {m: [list(map(float, d[m])) for d in per_n] for m in METRICS}
    res["slopes"] = {m: bootstrap_slope(ns, res["values"][m], cfg.n_boot, cfg.seed) for m in METRICS}
    res["slopes_median"] = {m: bootstrap_slope(ns, res["values"][m], cfg.n_boot, cfg.seed, stat="median")
                            for m in METRICS}
    res["slope"] = res["slopes"]["voronoi_eq17"]["slope"]
    res["slope_ci"] = res["slopes"]["voronoi_eq17"]["ci"]
    for key in ("not_converged", "restarts_not_converged", "certificate_failures",
                "certificate_failed_reps", "non_finite"):
        res[key] = [d[key] for d in per_n]
    res["mean_iterations"] = [d["mean_iterations"] for d in per_n]
    res["cell_sizes"] = [d["cell_sizes"] for d in per_n]
    return res


def run_least_squares(cfg: Config, log=print) -> Dict[str, Dict[str, object]]:
    """Every gate of ``cfg.gates`` over the n grid: ``{gate: summarise_gate(...)}``."""
    results = {}
    for gate_name in cfg.gates:
        per_n = []
        for i, n in enumerate(cfg.ns):
            t = time.time()
            per_n.append(simulate_one_n(gate_name, int(n), i, cfg))
            d = per_n[-1]
            log(f"[{cfg.expert} {gate_name:7s}] n={n:>6d}  eq17={np.mean(d['voronoi_eq17']):.4g}  "
                f"eq23_r1={np.mean(d['voronoi_eq23_r1']):.4g}  reg={np.mean(d['regression_l2']):.4g}  "
                f"not_conv={d['not_converged']}  cert_fail={d['certificate_failures']}  ({time.time() - t:.1f}s)")
        results[gate_name] = summarise_gate(per_n, cfg)
    return results
