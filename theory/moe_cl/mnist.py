"""Algorithm 1 with CNN experts on MNIST (Appendix A.4, Figure 5).

Setup (A.4): task types {1, 4, 7} (K = 3 clusters), T = N = 60 rounds; each
round draws a type uniformly, 100 training images of that digit and up to
1000 test images of it (MNIST's test split has only 982 fours, so a 4-round
uses all 982). Experts are the paper's 5-layer CNN (2 conv + 3 FC, ReLU on the
first four layers, Sigmoid on the last, 2x2 max-pool after conv1) with 10
sigmoid outputs trained by full-batch SGD (lr 0.2) on the MSE to the one-hot
label; E_tau is the test MSE of the expert on task tau's test images.

Choices the paper leaves open (documented in the README):
* all experts start from the same random initialisation (analogue of w_0 = 0);
* locality weight ||w_t - w_{t-1}||_2 over all CNN parameters (eq. 6);
* gate input: the round's mean image minus the mean image of the {1,4,7}
  training pool, rescaled to l2 norm ``gate_scale`` (its sum over samples
  would grow with the batch size); h_m = theta_m^T g_t;
* eta, alpha, lambda, Gamma as in Figure 2 (a data-derived sigma_0 is
  ~1e-3 for 784-d unit vectors and would give T_1 > T).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Sequence

import numpy as np
import torch
from torch import nn

from theory.moe_cl.core import ErrorLedger, GateHyper, GateState

DIGITS = (1, 4, 7)


@dataclass
class MnistConfig(GateHyper):
    """Appendix A.4 defaults except ``epochs`` (600 in the paper; reduced for a CPU budget)."""

    T: int = 60
    n_train: int = 100
    n_test: int = 1000
    epochs: int = 150
    lr: float = 0.2
    gamma: float = 0.4 ** 1.25
    gate_scale: float = 3.0


def load_mnist(path: Path) -> Dict[str, np.ndarray]:
    """Read the npz (train_x uint8 (60000, 28, 28), train_y, test_x, test_y); clear error if missing."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(
            f"error: MNIST file not found: {path}\n"
            "Figure 5 needs an .npz with arrays train_x (60000, 28, 28) uint8, train_y int64, "
            "test_x (10000, 28, 28) uint8, test_y int64 (the official MNIST split, e.g. torchvision's "
            "MNIST re-saved with numpy.savez). Pass its location with --mnist PATH."
        )
    with np.load(path) as z:
        missing = {"train_x", "train_y", "test_x", "test_y"} - set(z.files)
        if missing:
            raise SystemExit(f"error: {path} lacks arrays {sorted(missing)} (found {z.files})")
        return {k: z[k] for k in ("train_x", "train_y", "test_x", "test_y")}


def make_cnn() -> nn.Module:
    """5-layer CNN of A.4: (B, 1, 28, 28) -> (B, 10) in (0, 1)."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.Flatten(),
        nn.Linear(16 * 8 * 8, 64), nn.ReLU(),
        nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, 10), nn.Sigmoid(),
    )


def flat_params(net: nn.Module) -> torch.Tensor:
    """All parameters as one detached vector (P,)."""
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone()


def train_expert(net: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float) -> None:
    """Full-batch SGD on the MSE. x (n, 1, 28, 28) in [0, 1], y (n, 10) one-hot."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(epochs):
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()


@torch.no_grad()
def test_mse(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared test error (the A.4 replacement of eq. 14). x (n, 1, 28, 28), y (n, 10)."""
    return float(((net(x) - y) ** 2).mean())


def make_stream(data: Dict[str, np.ndarray], cfg: MnistConfig, seed: int):
    """Task arrivals shared by every M and by both termination modes.

    Returns list of T dicts with digit, train_x (100,1,28,28), train_y (100,10),
    test_x, test_y, gate (784,) feature.
    """
    rng = np.random.default_rng([seed, 5])
    pool = {k: np.flatnonzero(data["train_y"] == k) for k in DIGITS}
    tpool = {k: np.flatnonzero(data["test_y"] == k) for k in DIGITS}
    mu = np.concatenate([data["train_x"][pool[k]] for k in DIGITS]).reshape(-1, 784).mean(0) / 255.0

    def tensors(images: np.ndarray, digit: int):
        x = torch.tensor(images / 255.0, dtype=torch.float32)[:, None]
        y = torch.zeros(len(images), 10)
        y[:, digit] = 1.0
        return x, y

    stream = []
    for digit in rng.choice(DIGITS, size=cfg.T):
        tr = data["train_x"][rng.choice(pool[digit], cfg.n_train, replace=False)]
        te = data["test_x"][rng.choice(tpool[digit], min(cfg.n_test, len(tpool[digit])), replace=False)]
        g = tr.reshape(len(tr), -1).mean(0) / 255.0 - mu
        (xtr, ytr), (xte, yte) = tensors(tr, digit), tensors(te, digit)
        stream.append(dict(digit=int(digit), train_x=xtr, train_y=ytr, test_x=xte, test_y=yte,
                           gate=cfg.gate_scale * g / np.linalg.norm(g)))
    return stream


def run_mnist(stream: Sequence[dict], cfg: MnistConfig, M: int, terminate: bool, seed: int) -> dict:
    """Algorithm 1 with M CNN experts over the stream; returns F, G (T,), experts, stop_round, gate_updated."""
    T = len(stream)
    torch.manual_seed(seed)
    init = make_cnn().state_dict()
    experts = []
    for _ in range(M):
        net = make_cnn()
        net.load_state_dict(init)
        experts.append(net)
    gate = GateState(1, M, stream[0]["gate"].shape[0], cfg.eta, cfg.alpha, cfg.gamma, terminate)
    noise = np.random.default_rng([seed, 6, M]).uniform(0.0, cfg.lam, size=(T, 1, M))
    ledger = ErrorLedger(1, T)
    chosen = np.zeros(T, dtype=int)
    F, G, updated = np.zeros(T), np.zeros(T), np.zeros(T, dtype=bool)
    for t in range(1, T + 1):
        task = stream[t - 1]
        xsum = task["gate"][None]
        m_t, h, pi = gate.select(xsum, noise[t - 1])
        m = int(m_t[0])
        chosen[t - 1] = m
        before = flat_params(experts[m])
        train_expert(experts[m], task["train_x"], task["train_y"], cfg.epochs, cfg.lr)
        delta = np.array([float((flat_params(experts[m]) - before).norm())])
        for tau in np.flatnonzero(chosen[:t] == m):
            ledger.cur[0, tau] = test_mse(experts[m], stream[tau]["test_x"], stream[tau]["test_y"])
        ledger.at_train[0, t - 1] = ledger.cur[0, t - 1]
        updated[t - 1] = gate.step(t, xsum, h, pi, m_t, delta)[0]
        f, g = ledger.metrics(t)
        F[t - 1], G[t - 1] = f[0], g[0]
    return dict(F=F, G=G, experts=chosen, stop_round=int(gate.stop_round[0]), gate_updated=updated,
                digits=np.array([s["digit"] for s in stream]), T1=gate.T1)


def run_figure5(data: Dict[str, np.ndarray], cfg: MnistConfig, Ms: Sequence[int], seeds: Sequence[int],
                log=print) -> dict:
    """All (M, termination) runs; M = 1 is run once (its gate gradient is identically 0).

    Returns {mode: {M: list over seeds of run dicts}}.
    """
    runs: dict = {"termination": {}, "no_termination": {}}
    for M in Ms:
        for mode in ("termination", "no_termination"):
            if M == 1 and mode == "no_termination":
                runs[mode][M] = runs["termination"][M]
                continue
            runs[mode][M] = []
            for seed in seeds:
                t0 = time.time()
                r = run_mnist(make_stream(data, cfg, seed), cfg, M, mode == "termination", seed)
                runs[mode][M].append(r)
                log(f"[fig5] M={M} {mode} seed={seed}: F_T={r['F'][-1]:.4f} G_T={r['G'][-1]:.4f} "
                    f"stop={r['stop_round']} ({time.time() - t0:.0f}s)")
    return runs
