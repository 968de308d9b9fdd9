"""Prefix-MoE regression model of paper eq. (14) / eq. (21) for one row of one head.

The regression function for a mixing measure ``G = sum_k exp(beta0_k) delta_(beta1_k, a_k, b_k)``
with ``K`` prefix atoms is

    g_G(X) = [ sum_j exp(X^T B0_j X + c0_j) h(X, eta0_j) + sum_k e_k(X) h(X, (a_k, b_k)) ]
             / [ sum_j exp(X^T B0_j X + c0_j)           + sum_k e_k(X) ]
    e_k(X) = exp(beta0_k + gate(beta1_k^T X)),      h(X, (a, b)) = phi(a^T X + b),

with expert activation ``phi`` = GELU (default), ``z -> z^p`` (``expert="poly"``),
ReLU (``"relu"``) or the identity (``"affine"``, experts ``a^T X + b``),
where ``gate`` is the package's own gate object (``norga.gates.modules``): the
identity for ``linear`` (eq. 21) and ``s + alpha*act(tau*s)`` for ``norga`` (eq. 14).
The N pre-trained experts (``B0, c0, eta0``) are known and only enter through
the two per-sample sums ``P0 = sum_j exp(.)`` and ``Q0 = sum_j exp(.) h(X, eta0_j)``.

Atom parameters are packed per atom as ``[beta0, beta1 (D), a (D), b]``
(``Q = 2D + 2`` numbers); a batch of ``B`` candidate measures is a tensor
``theta`` of shape ``(B, K, Q)``. Everything is float64.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
from torch import Tensor

import torch.nn.functional as F

from norga.gates.modules import Gate, build_gate

GATE_NAMES = ("linear", "tanh", "sigmoid", "gelu")


def make_gate(name: str, alpha: float = 1.0, tau: float = 1.0) -> Gate:
    """The package gate for ``name`` in GATE_NAMES, frozen and in float64.

    ``alpha``/``tau`` are the *known* constants of eq. (14) (they are not part of
    the mixing measure G, so the least-squares fit does not estimate them).
    """
    if name not in GATE_NAMES:
        raise ValueError(f"unknown gate {name!r}; choose from {GATE_NAMES}")
    if name == "linear":
        gate = build_gate("linear")
    else:
        gate = build_gate("norga", activation=name, alpha_init=alpha, tau_init=tau)
    gate = gate.double()
    gate.freeze()
    return gate


EXPERTS = ("gelu", "poly", "affine", "relu")


def value_and_slope(fn, z: Tensor) -> Tuple[Tensor, Tensor]:
    """``fn(z)`` and its elementwise derivative ``fn'(z)`` for an elementwise ``fn``, any shape.

    For gates the derivative comes from autograd through the gate's own
    forward, so the fit uses exactly the code the ViT uses.
    """
    with torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        out = fn(zz)
        (slope,) = torch.autograd.grad(out.sum(), zz)
    return out.detach(), slope


@dataclass
class TruthSpec:
    """Known pre-trained part and the true prefix mixing measure G_*.

    Shapes: ``B0 (N, D, D)``, ``c0 (N,)``, ``a0 (N, D)``, ``b0 (N,)``,
    ``theta_star (L, Q)`` packed as ``[beta0, beta1, a, b]`` per atom.
    """

    B0: Tensor
    c0: Tensor
    a0: Tensor
    b0: Tensor
    theta_star: Tensor
    power: int
    x_range: float
    expert: str = "gelu"

    def phi(self, u: Tensor) -> Tensor:
        """Expert activation, elementwise: GELU, ``u ** power``, identity or ReLU."""
        if self.expert == "gelu":
            return F.gelu(u)
        if self.expert == "poly":
            return u ** self.power
        return u if self.expert == "affine" else F.relu(u)

    @property
    def homogeneity(self) -> int:
        """Degree p with ``phi(c u) = c^p phi(u)`` for c > 0 (GELU has none; 1 is used)."""
        return self.power if self.expert == "poly" else 1

    @property
    def dim(self) -> int:
        return int(self.B0.shape[-1])


def default_truth(power: int = 2, x_range: float = 1.0, expert: str = "gelu") -> TruthSpec:
    """The setup documented in ``theory.gating_rates.experiments``: N = 2, D = 2, L = 2."""
    if expert not in EXPERTS:
        raise ValueError(f"unknown expert {expert!r}; choose from {EXPERTS}")
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    B0 = t([[[0.30, 0.10], [0.10, -0.20]], [[-0.25, 0.05], [0.05, 0.20]]])
    c0 = t([0.0, 0.0])
    a0 = t([[0.5, -0.5], [-0.4, 0.3]])
    b0 = t([0.5, -0.5])
    theta_star = t([
        # beta0, beta1,        a,           b
        [0.0, 1.5, 0.5, 1.5, -1.0, 0.0],
        [0.0, -1.0, 1.5, 0.5, 1.5, 0.3],
    ])
    return TruthSpec(B0, c0, a0, b0, theta_star, power, x_range, expert)


def single_atom_truth(expert: str = "gelu", power: int = 2) -> TruthSpec:
    """:func:`default_truth` with only its first prefix atom (L = 1): the E1 / E2 setting."""
    spec = default_truth(power, 1.0, expert)
    spec.theta_star = spec.theta_star[:1].clone()
    return spec


def sample_inputs(n: int, spec: TruthSpec, gen: torch.Generator, batch: int = 1) -> Tensor:
    """X ~ Uniform([-x_range, x_range]^D), shape ``(batch, n, D)`` (bounded input space)."""
    u = torch.rand(batch, n, spec.dim, generator=gen, dtype=torch.float64)
    return (2.0 * u - 1.0) * spec.x_range


def pretrained_sums(X: Tensor, spec: TruthSpec) -> Tuple[Tensor, Tensor]:
    """``P0 = sum_j exp(s0_j)`` and ``Q0 = sum_j exp(s0_j) h(X, eta0_j)``, each ``(..., n)``.

    ``X`` has shape ``(..., n, D)``; ``s0_j = X^T B0_j X + c0_j`` (quadratic gating).
    """
    s0 = torch.einsum("...nd,jde,...ne->...nj", X, spec.B0, X) + spec.c0
    h0 = spec.phi(X @ spec.a0.T + spec.b0)
    w0 = torch.exp(s0)
    return w0.sum(-1), (w0 * h0).sum(-1)


def _atom_terms(X: Tensor, theta: Tensor, gate: Gate, phi, with_slope: bool = False):
    """Per-atom pieces for ``X (B, n, D)`` and ``theta (B, K, Q)``.

    Returns ``e (B, K, n)`` (= exp(beta0 + gate(beta1^T X))), ``h (B, K, n)``
    (= phi(a^T X + b)) and, only if ``with_slope`` (else None), ``gslope`` =
    gate'(beta1^T X) and ``hslope`` = phi'(a^T X + b), both ``(B, K, n)``.
    Without ``with_slope`` the result is differentiable by autograd.
    """
    D = X.shape[-1]
    beta0, beta1 = theta[..., 0], theta[..., 1:1 + D]
    a, b = theta[..., 1 + D:1 + 2 * D], theta[..., 1 + 2 * D]
    z = torch.einsum("bkd,bnd->bkn", beta1, X)
    u = torch.einsum("bkd,bnd->bkn", a, X) + b.unsqueeze(-1)
    if with_slope:
        gz, gslope = value_and_slope(gate, z)
        h, hslope = value_and_slope(phi, u)
    else:
        gz, h, gslope, hslope = gate(z), phi(u), None, None
    e = torch.exp(beta0.unsqueeze(-1) + gz)
    return e, h, gslope, hslope


def regression_fn(X: Tensor, P0: Tensor, Q0: Tensor, theta: Tensor, gate: Gate, phi) -> Tensor:
    """``g_G(X)`` of shape ``(B, n)`` for ``X (B, n, D)``, ``P0, Q0 (B, n)``, ``theta (B, K, Q)``.

    ``phi`` is the expert activation (``TruthSpec.phi``).
    """
    e, h, _, _ = _atom_terms(X, theta, gate, phi)
    return (Q0 + (e * h).sum(1)) / (P0 + e.sum(1))


def regression_jacobian(X: Tensor, P0: Tensor, Q0: Tensor, theta: Tensor, gate: Gate, phi):
    """``g (B, n)`` and its Jacobian ``J (B, n, K*Q)`` w.r.t. the packed ``theta``.

    With ``pi_k = e_k / T`` and ``u_k = a_k^T X + b_k``:
    dg/dbeta0_k = pi_k (h_k - g);  dg/dbeta1_k = pi_k (h_k - g) gate'(z_k) X;
    dg/da_k = pi_k phi'(u_k) X;     dg/db_k = pi_k phi'(u_k).
    """
    e, h, gslope, hslope = _atom_terms(X, theta, gate, phi, with_slope=True)
    T = P0 + e.sum(1)
    g = (Q0 + (e * h).sum(1)) / T
    pi = e / T.unsqueeze(1)
    d_beta0 = pi * (h - g.unsqueeze(1))                      # (B, K, n)
    d_b = pi * hslope                                         # (B, K, n)
    Xe = X.unsqueeze(1)                                       # (B, 1, n, D)
    d_beta1 = (d_beta0 * gslope).unsqueeze(-1) * Xe          # (B, K, n, D)
    d_a = d_b.unsqueeze(-1) * Xe                              # (B, K, n, D)
    J = torch.cat([d_beta0.unsqueeze(-1), d_beta1, d_a, d_b.unsqueeze(-1)], dim=-1)  # (B, K, n, Q)
    Bsz, K, n, Q = J.shape
    return g, J.permute(0, 2, 1, 3).reshape(Bsz, n, K * Q)


def embed_truth(spec: TruthSpec, n_atoms: int) -> Tensor:
    """G_* written with ``n_atoms >= L`` atoms, shape ``(n_atoms, Q)``.

    Atom 0 is split into equal-weight copies (same location, weights halved …)
    so that ``g`` is unchanged; this is the reference the least-squares
    objective of any fit must beat (``G_* in G_{L'}(Theta)``).
    """
    L = spec.theta_star.shape[0]
    if n_atoms < L:
        raise ValueError(f"need at least L={L} atoms, got {n_atoms}")
    extra = n_atoms - L
    first = spec.theta_star[0].clone()
    first[0] = first[0] - torch.log(torch.tensor(float(extra + 1), dtype=torch.float64))
    rows = [first] * (extra + 1) + [spec.theta_star[j] for j in range(1, L)]
    return torch.stack(rows)
