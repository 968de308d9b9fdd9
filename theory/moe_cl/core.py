"""Algorithm 1 of "Theory on Mixture-of-Experts in Continual Learning" (Li et al.).

Gate-side mechanics shared by the synthetic (Fig. 2) and MNIST (Fig. 5)
experiments, batched over ``B`` independent runs (seeds):

* gate outputs  h_m = sum_i theta_m^T X_{t,i} = theta_m^T xsum_t     (Sec. 3.2)
* noisy top-1 routing, eq. (1); softmax gate, eq. (2)
* min-norm expert update, eq. (5)
* gradient of L_task = L_tr + L_loc + L_aux (eqs. 6-8) w.r.t. Theta; L_tr
  does not depend on Theta, and only pi_{m_t} carries Theta_t (Appendix D,
  eqs. 27-30), so for every expert m
      grad_m = (||w_t^{m_t} - w_{t-1}^{m_t}|| + alpha*M*f_t^{m_t}/t)
               * pi_{m_t} * (1{m = m_t} - pi_m) * xsum_t
* GD step, eq. (9), and the convergence flags / termination, Alg. 1 l. 6-13.

All arrays are numpy float64; shapes are given in each docstring.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


def exploration_rounds(eta: float, M: int) -> int:
    """T_1 = ceil(M / eta) (Algorithm 1, line 1)."""
    if eta <= 0:
        raise ValueError(f"eta must be > 0, got {eta}")
    return int(math.ceil(M / eta - 1e-12))


def gate_outputs(theta: np.ndarray, xsum: np.ndarray) -> np.ndarray:
    """Linear gate outputs h.

    theta (B, M, d), xsum (B, d) = sum of the round's samples  ->  h (B, M).
    """
    return np.einsum("bmd,bd->bm", theta, xsum)


def softmax(h: np.ndarray) -> np.ndarray:
    """Eq. (2): row-wise softmax of h (B, M) -> pi (B, M)."""
    z = h - h.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def route(h: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Eq. (1): m_t = argmax_m (h_m + r_m); h, noise (B, M) -> m_t (B,) int."""
    return np.argmax(h + noise, axis=1)


def min_norm_update(w_prev: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Eq. (5): w = w_prev + X (X^T X)^{-1} (y - X^T w_prev).

    w_prev (B, d), X (B, d, s) with s < d, y (B, s)  ->  w (B, d) with X^T w = y.
    """
    resid = y - np.einsum("bds,bd->bs", X, w_prev)
    gram = np.einsum("bds,bdk->bsk", X, X)
    coef = np.linalg.solve(gram, resid[..., None])[..., 0]
    return w_prev + np.einsum("bds,bs->bd", X, coef)


def gate_gradient(pi: np.ndarray, m_t: np.ndarray, coef: np.ndarray, xsum: np.ndarray) -> np.ndarray:
    """Gradient of L_loc + L_aux w.r.t. every theta_m (eqs. 27-30).

    pi (B, M) softmax at Theta_t, m_t (B,), coef (B,) = ||Delta w|| + alpha*M*f/t,
    xsum (B, d)  ->  grad (B, M, d).
    """
    B, M = pi.shape
    rows = np.arange(B)
    onehot = np.zeros_like(pi)
    onehot[rows, m_t] = 1.0
    dpi = pi[rows, m_t][:, None] * (onehot - pi)  # d pi_{m_t} / d h_m, (B, M)
    return (coef[:, None] * dpi)[..., None] * xsum[:, None, :]


@dataclass
class GateHyper:
    """Algorithm 1 hyperparameters shared by Fig. 2 and Fig. 5 (Appendix A.2 values):
    gate learning rate eta, load-balancing weight alpha, routing-noise bound lambda."""

    eta: float = 0.5
    alpha: float = 0.5
    lam: float = 0.3


@dataclass
class GateState:
    """Gate parameters and bookkeeping for B runs with M experts of input dim d.

    theta (B, M, d); flags (B, M) bool = I^{(m)}; loads (B, M) = L_t^{(m)}
    (tasks routed so far); stop_round (B,) = first round whose update was
    skipped because every flag was set (-1 while the gate still trains).
    """

    B: int
    M: int
    d: int
    eta: float
    alpha: float
    gamma: float
    terminate: bool = True
    theta: np.ndarray = field(init=False)
    flags: np.ndarray = field(init=False)
    loads: np.ndarray = field(init=False)
    stop_round: np.ndarray = field(init=False)
    T1: int = field(init=False)

    def __post_init__(self) -> None:
        self.theta = np.zeros((self.B, self.M, self.d))
        self.flags = np.zeros((self.B, self.M), dtype=bool)
        self.loads = np.zeros((self.B, self.M))
        self.stop_round = np.full(self.B, -1, dtype=int)
        self.T1 = exploration_rounds(self.eta, self.M)

    def select(self, xsum: np.ndarray, noise: np.ndarray):
        """Route round t's task. xsum (B, d), noise (B, M) -> (m_t (B,), h (B, M), pi (B, M))."""
        h = gate_outputs(self.theta, xsum)
        m_t = route(h, noise)
        self.loads[np.arange(self.B), m_t] += 1.0
        return m_t, h, softmax(h)

    def step(self, t: int, xsum: np.ndarray, h: np.ndarray, pi: np.ndarray,
             m_t: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Alg. 1 lines 6-13 for round t (1-based); returns the mask (B,) of runs that updated.

        delta (B,) = ||w_t^{m_t} - w_{t-1}^{m_t}||_2 (the locality-loss weight).
        """
        rows = np.arange(self.B)
        if self.terminate and t > self.T1:
            gap = np.abs(h - h[rows, m_t][:, None])
            self.flags |= gap < self.gamma
        if self.terminate:
            update = ~self.flags.all(axis=1)
            newly = (~update) & (self.stop_round < 0)
            self.stop_round[newly] = t
        else:
            update = np.ones(self.B, dtype=bool)
        f_t = self.loads[rows, m_t] / t
        coef = delta + self.alpha * self.M * f_t / t
        grad = gate_gradient(pi, m_t, coef, xsum)
        self.theta -= self.eta * grad * update[:, None, None]
        return update


@dataclass
class ErrorLedger:
    """Forgetting F_t (eq. 15) and generalization error G_t (eq. 16) for B runs.

    Holds cur (B, T) = E_tau(w_t^{(m_tau)}) for the current round t and
    at_train (B, T) = E_tau(w_tau^{(m_tau)}); callers overwrite entries of cur
    whose expert changed.
    """

    B: int
    T: int
    cur: np.ndarray = field(init=False)
    at_train: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.cur = np.zeros((self.B, self.T))
        self.at_train = np.zeros((self.B, self.T))

    def metrics(self, t: int):
        """After round t (1-based, round t's entries filled): (F_t (B,), G_t (B,)); F_1 := 0."""
        G = self.cur[:, :t].mean(axis=1)
        if t == 1:
            return np.zeros(self.B), G
        F = (self.cur[:, : t - 1] - self.at_train[:, : t - 1]).mean(axis=1)
        return F, G


def summarize(F: np.ndarray, G: np.ndarray, stop_round: Optional[np.ndarray]) -> dict:
    """Per-setting summary for results.json. F, G (S, T) over S seeds; stop_round (S,) or None."""
    T = F.shape[1]
    tail = max(1, int(math.ceil(0.1 * T)))
    out = {
        "final_forgetting": float(F[:, -1].mean()),
        "final_generalization_error": float(G[:, -1].mean()),
        "max_forgetting_last_10pct": float(F[:, -tail:].mean(axis=0).max()),
        "max_generalization_error_last_10pct": float(G[:, -tail:].mean(axis=0).max()),
        "n_seeds": int(F.shape[0]),
    }
    if stop_round is None:
        out["gate_stop_round"] = None
    else:
        sr = [int(s) if s >= 0 else None for s in stop_round]
        out["gate_stop_round"] = sr
        done = [s for s in sr if s is not None]
        out["gate_stop_round_mean"] = float(np.mean(done)) if done else None
    return out
