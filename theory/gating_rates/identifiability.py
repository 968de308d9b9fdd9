"""E1: what the gate changes in identifiability (deterministic; paper Sec. 4.2, App. A).

One true prefix atom (``single_atom_truth``: the first atom of the default truth,
with the two known pre-trained experts), gates {linear, NoRGa tanh, NoRGa sigmoid}
x experts {affine, (a^T X + b)^2, ReLU, GELU}. For every pair:

* ``paths``: ``||g_path(delta) - g_path(0)||_{L2(mu)}`` along the four families of
  ``gating_rates_paths`` for ``delta`` in ``cfg.deltas`` and the log-log slope in
  delta ("zero" when every value is at rounding level, <= ``ZERO_TOL``).
* ``def42``: Definition 4.2's function set for the true atom (k = 1), with the
  gate's own derivatives ``X^nu [gate'(z)^|nu| + 1{|nu|=2} gate''(z)] d^gamma h``,
  0 <= |nu| + |gamma| <= 2 (21 indexed functions for D = 2), evaluated on the
  Sobol grid; reported as the smallest singular value of the column-normalised
  matrix over the largest (0 if the set contains the zero function; ~1e-16 means
  linearly dependent, the condition fails), once for the indexed family as
  written and once after merging coincident functions (``X_u d h/d a_v`` and
  ``X_v d h/d a_u`` coincide for every expert phi(a^T X + b) once D >= 2, and
  ``X_u d h/d b = d h/d a_u`` under the linear gate), with the number merged.
* ``pde``: ``max |d2F/(dbeta1_u db) - dF/da_u| / max |dF/da_u|`` with
  ``F = exp(gate(beta1^T X)) phi(a^T X + b)`` by autograd on the grid.

and, for GELU experts only, ``omega``: ``omega(eps) / eps`` with
``omega(eps) = min ||g_G - g_G*|| s.t. L_1(G, G_*) = eps`` (eq. 17) over measures
with two atoms in the box Theta, by multistart L-BFGS (``gating_rates_omega``).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from theory.gating_rates.loss import loglog_slope
from theory.gating_rates.model import TruthSpec, make_gate, single_atom_truth
from theory.gating_rates.omega import omega_table
from theory.gating_rates.paths import PATH_NAMES, Grid, path_distances

IDENT_GATES = ("linear", "tanh", "sigmoid")
IDENT_EXPERTS = ("affine", "poly", "relu", "gelu")
ZERO_TOL = 1e-13


@dataclass
class IdentConfig:
    """E1 settings (saved in results.json)."""

    gates: Sequence[str] = IDENT_GATES
    experts: Sequence[str] = IDENT_EXPERTS
    deltas: Sequence[float] = tuple(float(d) for d in np.logspace(-3, -1, 7))
    log2_points: int = 16          # Sobol points for the path distances (ReLU needs many)
    log2_points_def42: int = 12
    omega_eps: Sequence[float] = (0.1, 0.01, 0.001)
    omega_starts: int = 8
    omega_maxiter: int = 400
    log2_points_omega: int = 10
    seed: int = 0

    @classmethod
    def quick(cls) -> "IdentConfig":
        return cls(deltas=(1e-2, 3e-2, 1e-1), log2_points=12, log2_points_def42=10,
                   omega_eps=(0.01,), omega_starts=1, omega_maxiter=30, log2_points_omega=9)


def derivatives(fn, z: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``fn(z)``, ``fn'(z)``, ``fn''(z)`` elementwise by autograd (0 where fn' is constant)."""
    with torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        f = fn(zz)
        (d1,) = torch.autograd.grad(f.sum(), zz, create_graph=True)
        if d1.requires_grad:
            (d2,) = torch.autograd.grad(d1.sum(), zz)
        else:
            d2 = torch.zeros_like(zz)
    return f.detach(), d1.detach(), d2.detach()


def def42_functions(spec: TruthSpec, gate, X: Tensor) -> Tensor:
    """Definition 4.2's set for the true atom, ``X (m, D)`` -> ``(m, n_functions)``.

    Parameters eta = (a (D), b); d^gamma h = prod_u X_u^{gamma_a_u} phi^{(|gamma|)}(u).
    """
    D = spec.dim
    atom = spec.theta_star[0]
    beta1, a, b = atom[1:1 + D], atom[1 + D:1 + 2 * D], atom[1 + 2 * D]
    _, g1, g2 = derivatives(gate, X @ beta1)
    phis = derivatives(spec.phi, X @ a + b)
    cols = []
    for nu in itertools.product(range(3), repeat=D):
        for gamma in itertools.product(range(3), repeat=D + 1):
            k_nu, k_gamma = sum(nu), sum(gamma)
            if k_nu + k_gamma > 2:
                continue
            mono = torch.prod(X ** torch.tensor(nu, dtype=X.dtype), dim=1)
            gate_part = g1 ** k_nu + (g2 if k_nu == 2 else 0.0)
            dh = torch.prod(X ** torch.tensor(gamma[:D], dtype=X.dtype), dim=1) * phis[k_gamma]
            cols.append(mono * gate_part * dh)
    return torch.stack(cols, 1)


def independence_ratio(A: Tensor) -> float:
    """sigma_min / sigma_max of the column-normalised ``A (m, k)``; 0 if a column vanishes."""
    norms = A.norm(dim=0)
    if bool((norms <= 1e-300).any()):
        return 0.0
    s = torch.linalg.svdvals(A / norms)
    return float(s[-1] / s[0])


def pde_residual(spec: TruthSpec, gate, X: Tensor) -> float:
    """Relative max residual of ``d2F/(dbeta1_u db) = dF/da_u`` at the true atom on ``X (m, D)``.

    Every sample gets its own copy of (beta1, a, b), so one backward pass gives
    the per-sample derivatives; everything is autograd through the package gate.
    """
    D, m = spec.dim, X.shape[0]
    atom = spec.theta_star[0]
    with torch.enable_grad():
        beta1 = atom[1:1 + D].expand(m, D).clone().requires_grad_(True)
        a = atom[1 + D:1 + 2 * D].expand(m, D).clone().requires_grad_(True)
        b = atom[1 + 2 * D].expand(m).clone().requires_grad_(True)
        F = torch.exp(gate((X * beta1).sum(1))) * spec.phi((X * a).sum(1) + b)      # (m,)
        dF_db, dF_da = torch.autograd.grad(F.sum(), (b, a), create_graph=True)
        (mixed,) = torch.autograd.grad(dF_db.sum(), beta1)                          # (m, D)
    return float((mixed - dF_da.detach()).abs().max() / dF_da.detach().abs().max())


def merge_coincident(A: Tensor, rtol: float = 1e-12) -> Tuple[Tensor, int]:
    """Drop columns of ``A (m, k)`` equal (to ``rtol`` of their scale) to an earlier kept column."""
    keep: List[int] = []
    for j in range(A.shape[1]):
        col = A[:, j]
        scale = float(col.abs().max()) + 1e-300
        if not any(float((col - A[:, k]).abs().max()) <= rtol * scale for k in keep):
            keep.append(j)
    return A[:, keep], A.shape[1] - len(keep)


def slope_or_zero(deltas: Sequence[float], values: np.ndarray) -> Dict[str, object]:
    """Log-log slope of ``values`` in delta, or ``zero=True`` when all are <= ZERO_TOL."""
    vmax = float(np.max(values))
    if vmax <= ZERO_TOL:
        return {"zero": True, "slope": None, "max": vmax}
    return {"zero": False, "slope": loglog_slope(deltas, values), "max": vmax}


def pair_table(spec: TruthSpec, gate, cfg: IdentConfig, grid: Grid, grid_small: Grid) -> Dict[str, object]:
    """Paths, Def. 4.2 and PDE residual for one (gate, expert)."""
    out: Dict[str, object] = {"paths": {}}
    for name in PATH_NAMES:
        dist = path_distances(name, spec, gate, grid, cfg.deltas)
        out["paths"][name] = dict(slope_or_zero(cfg.deltas, dist), g_dist=dist.tolist())
    A = def42_functions(spec, gate, grid_small.X[0])
    merged, n_merged = merge_coincident(A)
    out["def42_ratio_as_written"] = independence_ratio(A)
    out["def42_ratio_merged"] = independence_ratio(merged)
    out["def42_n_merged"] = n_merged
    out["pde_residual"] = pde_residual(spec, gate, grid_small.X[0])
    return out


def run_identifiability(cfg: IdentConfig, log=print) -> Dict[str, object]:
    """E1: ``{"pairs": {expert: {gate: pair_table}}, "omega": {gate: [...]}, "deltas": [...]}``."""
    t0 = time.time()
    out: Dict[str, object] = {"deltas": list(cfg.deltas), "pairs": {}}
    for expert in cfg.experts:
        spec = single_atom_truth(expert)
        grid = Grid.make(spec, cfg.log2_points, cfg.seed)
        small = Grid.make(spec, cfg.log2_points_def42, cfg.seed)
        out["pairs"][expert] = {g: pair_table(spec, make_gate(g), cfg, grid, small) for g in cfg.gates}
        for g, row in out["pairs"][expert].items():
            slopes = "  ".join(f"{k}={'0' if v['zero'] else format(v['slope'], '.2f')}"
                               for k, v in row["paths"].items())
            log(f"[E1 {expert:6s} {g:7s}] {slopes}  def42={row['def42_ratio_merged']:.1e}  "
                f"pde={row['pde_residual']:.1e}")
    spec = single_atom_truth("gelu")
    gates = {g: make_gate(g) for g in cfg.gates}
    out["omega"] = omega_table(spec, gates, Grid.make(spec, cfg.log2_points_omega, cfg.seed),
                               cfg.omega_eps, cfg.omega_starts, cfg.seed, cfg.omega_maxiter,
                               eval_grid=Grid.make(spec, cfg.log2_points, cfg.seed + 1))
    for g, rows in out["omega"].items():
        log(f"[E1 omega {g:7s}] " + "  ".join(f"eps={r['eps']:g}: {r['ratio']:.3e}" for r in rows))
    out["seconds"] = time.time() - t0
    return out
