"""Synthetic linear-regression CL of Appendix A.2 (Figure 2), batched over seeds.

Data (Definition 1 + Appendix A.2): K cluster centres with entries
N(0, sigma0^2); task n belongs to cluster n mod K (the paper's A.7 layout
W_1 = {1, 4}, W_2 = {2, 5}, W_3 = {3, 6}) and its ground truth is its centre
plus an offset with entries N(0, cluster_std^2); its feature signal is
v_n = w_n / sigma0 ("ground truths scaled by a constant", ||v_n||_inf = O(1)).
Round t draws n_t uniformly, puts beta_t * v_{n_t} in a random column of
X_t (d x s) and fills the other s-1 columns with N(0, sigma_t^2 I_d);
y_t = X_t^T w_{n_t}.

Two other task layouts (used by ``moe_cl_sweep``): ``gap`` sets the
within-cluster gap in the infinity norm exactly (the paper's assumption
||w_n - w_n'||_inf = O(sigma0^1.5) for tasks of one cluster): the Gaussian offsets
of a cluster are rescaled so that their largest pairwise infinity-norm distance
is ``gap``; ``independent`` draws every ground truth i.i.d. N(0, sigma0^2) with
no cluster structure, which is Appendix A.2's generation as written. All three
layouts consume the same random numbers, so arrivals and X_t's noise columns
are identical across layouts for a seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from theory.moe_cl.core import ErrorLedger, GateHyper, GateState, min_norm_update


@dataclass
class SynthConfig(GateHyper):
    """Appendix A.2 defaults; gamma=None means sigma0**1.25 (Alg. 1, Gamma = O(sigma0^1.25))."""

    T: int = 2000
    N: int = 6
    K: int = 3
    d: int = 10
    s: int = 6
    sigma0: float = 0.4
    sigma_t: float = 0.1
    cluster_std: Optional[float] = None  # None -> sigma0**1.5 (Sec. 5.2: within-cluster gap O(sigma0^1.5))
    beta: float = 1.0  # beta_t of Definition 1 (A.2 inserts v_n itself, i.e. beta_t = 1)
    gamma: Optional[float] = None
    gap: Optional[float] = None   # within-cluster infinity-norm gap; overrides cluster_std
    independent: bool = False     # A.2 as written: w_n i.i.d. N(0, sigma0^2), no clusters

    def resolved_gamma(self) -> float:
        """Termination threshold Gamma."""
        return self.sigma0 ** 1.25 if self.gamma is None else self.gamma

    def resolved_cluster_std(self) -> float:
        """Per-entry std of a task's offset from its cluster centre."""
        return self.sigma0 ** 1.5 if self.cluster_std is None else self.cluster_std


@dataclass
class SynthData:
    """Task pool and arrivals for B seeds.

    W (B, N, d) ground truths; tasks (B, T) int; X (B, T, d, s); y (B, T, s).
    """

    W: np.ndarray
    tasks: np.ndarray
    X: np.ndarray
    y: np.ndarray


def ground_truths(cfg: SynthConfig, rng: np.random.Generator) -> np.ndarray:
    """Task ground truths ``W (N, d)``; task n is in cluster n mod K (see the module docstring)."""
    centres = rng.normal(0.0, cfg.sigma0, size=(cfg.K, cfg.d))
    z = rng.normal(0.0, 1.0, size=(cfg.N, cfg.d))
    if cfg.independent:
        return cfg.sigma0 * z
    cluster = np.arange(cfg.N) % cfg.K
    if cfg.gap is None:
        return centres[cluster] + cfg.resolved_cluster_std() * z
    for k in range(cfg.K):
        rows = np.flatnonzero(cluster == k)
        diam = max((np.abs(z[i] - z[j]).max() for i in rows for j in rows), default=0.0)
        z[rows] *= cfg.gap / diam if diam > 0 else 0.0
    return centres[cluster] + z


def within_cluster_gaps(W: np.ndarray, K: int) -> np.ndarray:
    """Largest pairwise infinity-norm distance inside each cluster, ``W (N, d)`` -> ``(K,)``."""
    cluster = np.arange(W.shape[0]) % K
    out = np.zeros(K)
    for k in range(K):
        rows = np.flatnonzero(cluster == k)
        out[k] = max((np.abs(W[i] - W[j]).max() for i in rows for j in rows), default=0.0)
    return out


def make_data(cfg: SynthConfig, seeds) -> SynthData:
    """Generate pool + arrival sequence for each seed (independent of M and of termination)."""
    if cfg.s >= cfg.d:
        raise ValueError(f"need the overparameterized regime s < d, got s={cfg.s}, d={cfg.d}")
    Ws, tasks, Xs, ys = [], [], [], []
    for seed in seeds:
        rng = np.random.default_rng([int(seed), 0])
        W = ground_truths(cfg, rng)
        V = W / cfg.sigma0
        n_t = rng.integers(0, cfg.N, size=cfg.T)
        X = rng.normal(0.0, cfg.sigma_t, size=(cfg.T, cfg.d, cfg.s))
        pos = rng.integers(0, cfg.s, size=cfg.T)
        X[np.arange(cfg.T), :, pos] = cfg.beta * V[n_t]
        y = np.einsum("tds,td->ts", X, W[n_t])
        Ws.append(W), tasks.append(n_t), Xs.append(X), ys.append(y)
    return SynthData(np.stack(Ws), np.stack(tasks), np.stack(Xs), np.stack(ys))


def routing_noise(cfg: SynthConfig, seeds, M: int) -> np.ndarray:
    """r_t^{(m)} ~ Unif[0, lambda], (B, T, M); identical with and without termination."""
    return np.stack([np.random.default_rng([int(s), 1, M]).uniform(0.0, cfg.lam, size=(cfg.T, M)) for s in seeds])


def run_synthetic(cfg: SynthConfig, data: SynthData, noise: np.ndarray, M: int,
                  terminate: bool) -> Dict[str, np.ndarray]:
    """Algorithm 1 on the synthetic stream for B seeds at once.

    Returns F, G (B, T) [index t-1 = round t], experts (B, T) chosen m_t,
    gate_updated (B, T) bool, stop_round (B,), theta_norm (B, T) and
    final_round_errors (B, T) = E_tau(w_T^{(m_tau)}) for every round tau (their
    mean over tau is G_T).
    """
    B, T = data.tasks.shape
    rows = np.arange(B)
    gate = GateState(B, M, cfg.d, cfg.eta, cfg.alpha, cfg.resolved_gamma(), terminate)
    w = np.zeros((B, M, cfg.d))
    ledger = ErrorLedger(B, T)
    experts = np.zeros((B, T), dtype=int)
    out = {k: np.zeros((B, T)) for k in ("F", "G", "theta_norm")}
    updated = np.zeros((B, T), dtype=bool)
    for t in range(1, T + 1):
        X, y, n_t = data.X[:, t - 1], data.y[:, t - 1], data.tasks[:, t - 1]
        xsum = X.sum(axis=2)
        m_t, h, pi = gate.select(xsum, noise[:, t - 1])
        experts[:, t - 1] = m_t
        w_old = w[rows, m_t]
        w_new = min_norm_update(w_old, X, y)
        w[rows, m_t] = w_new
        delta = np.linalg.norm(w_new - w_old, axis=1)
        # expert m_t changed: refresh E_tau(w_t^{(m_tau)}) for every tau <= t routed to it
        err_by_task = ((w_new[:, None, :] - data.W) ** 2).sum(axis=2)  # (B, N)
        mask = experts[:, :t] == m_t[:, None]
        fresh = np.take_along_axis(err_by_task, data.tasks[:, :t], axis=1)
        ledger.cur[:, :t] = np.where(mask, fresh, ledger.cur[:, :t])
        ledger.at_train[:, t - 1] = err_by_task[rows, n_t]
        updated[:, t - 1] = gate.step(t, xsum, h, pi, m_t, delta)
        out["F"][:, t - 1], out["G"][:, t - 1] = ledger.metrics(t)
        out["theta_norm"][:, t - 1] = np.linalg.norm(gate.theta.reshape(B, -1), axis=1)
    out.update(experts=experts, gate_updated=updated, stop_round=gate.stop_round.copy(), T1=gate.T1,
               final_round_errors=ledger.cur.copy())
    return out
