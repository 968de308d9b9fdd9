"""Mechanics of Algorithm 1 ("Theory on MoE in CL") and the quick figure runs."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))  # theory/ is beside norga/, not installed

from theory.moe_cl import figures as moe_cl, sweep as moe_cl_sweep  # noqa: E402
from theory.moe_cl.core import GateState, exploration_rounds, gate_gradient, min_norm_update, softmax  # noqa: E402
from theory.moe_cl.synth import SynthConfig, make_data, routing_noise, run_synthetic, within_cluster_gaps  # noqa: E402

MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist.npz"


def quick_cfg(T: int = 300) -> SynthConfig:
    return SynthConfig(T=T)


def test_min_norm_update_interpolates_and_is_minimal():
    rng = np.random.default_rng(0)
    B, d, s = 5, 10, 6
    X, y, w_prev = rng.normal(size=(B, d, s)), rng.normal(size=(B, s)), rng.normal(size=(B, d))
    w = min_norm_update(w_prev, X, y)
    np.testing.assert_allclose(np.einsum("bds,bd->bs", X, w), y, atol=1e-10)  # X^T w = y exactly
    for b in range(B):  # the step is the pseudo-inverse (min-norm) correction, i.e. lies in col(X)
        ref = w_prev[b] + np.linalg.pinv(X[b].T) @ (y[b] - X[b].T @ w_prev[b])
        np.testing.assert_allclose(w[b], ref, atol=1e-10)


def test_min_norm_update_inside_a_run_fits_each_task():
    cfg = quick_cfg(T=60)
    data = make_data(cfg, [3])
    out = run_synthetic(cfg, data, routing_noise(cfg, [3], 5), 5, True)
    w = np.zeros((5, cfg.d))  # replay the routing decisions: each chosen expert fits its round exactly
    for t in range(cfg.T):
        m = out["experts"][0, t]
        w[m] = min_norm_update(w[m][None], data.X[:, t], data.y[:, t])[0]
        np.testing.assert_allclose(data.X[0, t].T @ w[m], data.y[0, t], atol=1e-9)


def test_exploration_rounds():
    assert exploration_rounds(0.5, 1) == 2
    assert exploration_rounds(0.5, 5) == 10
    assert exploration_rounds(0.3, 1) == 4  # ceil(3.33)
    with pytest.raises(ValueError):
        exploration_rounds(0.0, 3)


def test_gate_gradient_matches_autograd_of_eqs_6_to_8():
    rng = np.random.default_rng(1)
    M, d, t, alpha, delta = 4, 7, 9, 0.5, 0.8
    theta = rng.normal(size=(M, d))
    xsum = rng.normal(size=d)
    m_t = 2
    loads = np.array([2.0, 3.0, 3.0, 1.0])  # L_t^{(m)} including round t
    past_P = rng.uniform(size=M)  # sum_{tau<t} pi_m(X_tau, Theta_tau) 1{m_tau = m}: constant in Theta_t
    th = torch.tensor(theta, requires_grad=True)
    pi = torch.softmax(th @ torch.tensor(xsum), dim=0)
    f = torch.tensor(loads / t)
    onehot = torch.zeros(M, dtype=torch.float64)
    onehot[m_t] = 1.0
    P = (torch.tensor(past_P) + pi * onehot) / t
    loss = pi[m_t] * delta + alpha * M * (f * P).sum()  # L_loc (only m_t moved) + L_aux; L_tr has no Theta
    loss.backward()
    coef = np.array([delta + alpha * M * loads[m_t] / t / t])
    ours = gate_gradient(softmax((theta @ xsum)[None]), np.array([m_t]), coef, xsum[None])[0]
    np.testing.assert_allclose(ours, th.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.sum(axis=0), 0.0, atol=1e-12)  # Lemma 4


def test_gate_stops_updating_after_termination():
    cfg = quick_cfg()
    seeds = [0, 1, 2, 3]
    data = make_data(cfg, seeds)
    noise = routing_noise(cfg, seeds, 10)
    on = run_synthetic(cfg, data, noise, 10, True)
    off = run_synthetic(cfg, data, noise, 10, False)
    assert off["gate_updated"].all() and (off["stop_round"] == -1).all()
    for b in range(len(seeds)):
        stop = on["stop_round"][b]
        assert stop > on["T1"], "flags are only set after T1 rounds"
        assert on["gate_updated"][b, : stop - 1].all()
        assert not on["gate_updated"][b, stop - 1:].any()  # no update from the stop round on
        assert np.ptp(on["theta_norm"][b, stop - 1:]) == 0.0
        assert np.ptp(off["theta_norm"][b, stop - 1:]) > 0.0
        # same arrivals and noise: both modes coincide until the gate stops
        np.testing.assert_array_equal(on["experts"][b, :stop], off["experts"][b, :stop])


def test_noise_balances_loads_within_a_cluster_after_termination():
    """Eq. (1) with a frozen gate: experts with equal outputs for a cluster share its tasks evenly."""
    rng = np.random.default_rng(2)
    d, M, T = 10, 5, 4000
    v = rng.normal(size=(2, d))
    v[1] -= v[1] @ v[0] / (v[0] @ v[0]) * v[0]  # orthogonal signals: cross-cluster gap is 1 > lambda
    gate = GateState(1, M, d, eta=0.5, alpha=0.5, gamma=0.1)
    gate.theta[0, :2] = v[0] / np.dot(v[0], v[0])  # experts 0,1 -> cluster A (h = 1)
    gate.theta[0, 2:] = v[1] / np.dot(v[1], v[1])  # experts 2,3,4 -> cluster B
    gate.flags[:] = True  # terminated: step() must not move theta
    theta0 = gate.theta.copy()
    counts = np.zeros((2, M))
    for t in range(1, T + 1):
        k = t % 2
        xsum = (v[k] + rng.normal(0.0, 0.01, size=d))[None]
        m_t, h, pi = gate.select(xsum, rng.uniform(0.0, 0.3, size=(1, M)))
        assert not gate.step(t, xsum, h, pi, m_t, np.array([1.0]))[0]
        counts[k, m_t[0]] += 1
    np.testing.assert_array_equal(gate.theta, theta0)
    assert counts[0, 2:].sum() == 0 and counts[1, :2].sum() == 0  # no cross-cluster routing
    np.testing.assert_allclose(counts[0, :2] / counts[0].sum(), 1 / 2, atol=0.04)
    np.testing.assert_allclose(counts[1, 2:] / counts[1].sum(), 1 / 3, atol=0.04)


def brute_force_metrics(cfg, data, experts, M):
    """F_t, G_t of eqs. (15)-(16) by storing every round's expert weights (one seed)."""
    T = cfg.T
    hist = np.zeros((T, M, cfg.d))
    w = np.zeros((M, cfg.d))
    for t in range(T):
        m = experts[t]
        w[m] = min_norm_update(w[m][None], data.X[:, t], data.y[:, t])[0]
        hist[t] = w
    E = lambda t, tau: float(np.sum((hist[t, experts[tau]] - data.W[0, data.tasks[0, tau]]) ** 2))
    F = [0.0] + [np.mean([E(t, tau) - E(tau, tau) for tau in range(t)]) for t in range(1, T)]
    G = [np.mean([E(t, tau) for tau in range(t + 1)]) for t in range(T)]
    return np.array(F), np.array(G)


def test_forgetting_and_generalization_match_definitions():
    cfg = quick_cfg(T=80)
    data = make_data(cfg, [5])
    out = run_synthetic(cfg, data, routing_noise(cfg, [5], 5), 5, True)
    F, G = brute_force_metrics(cfg, data, out["experts"][0], 5)
    np.testing.assert_allclose(out["F"][0], F, atol=1e-9)
    np.testing.assert_allclose(out["G"][0], G, atol=1e-9)


def test_quick_figure2_cli(tmp_path):
    res = moe_cl.main(["--figure", "2", "--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "figure2.png").stat().st_size > 10_000
    for mode in ("termination", "no_termination"):
        assert set(saved[mode]) == {"1", "5", "10", "20"}
        for entry in saved[mode].values():
            for key in ("final_forgetting", "final_generalization_error", "max_forgetting_last_10pct",
                        "max_generalization_error_last_10pct", "gate_stop_round"):
                assert key in entry
            assert math.isfinite(entry["final_generalization_error"])
    term = res["termination"]
    assert term["5"]["gate_stop_round_mean"] > term["5"]["T1"]
    # MoE with termination beats the single expert (paper's first claim), even in the quick run
    assert term["10"]["final_generalization_error"] < 0.6 * term["1"]["final_generalization_error"]


def test_cli_rejects_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit):
        moe_cl.main(["--figure", "3", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        moe_cl.main(["--figure", "2", "--seeds", "0", "--out", str(tmp_path)])
    missing = tmp_path / "nope" / "mnist.npz"
    with pytest.raises(SystemExit) as err:
        moe_cl.main(["--figure", "5", "--quick", "--mnist", str(missing), "--out", str(tmp_path / "o")])
    assert str(missing) in str(err.value) and "train_x" in str(err.value)


@pytest.mark.skipif(not MNIST.is_file(), reason=f"{MNIST} absent (real MNIST only exists on the project's machines)")
def test_quick_figure5_cli(tmp_path):
    res = moe_cl.main(["--figure", "5", "--quick", "--mnist", str(MNIST), "--out", str(tmp_path)])
    assert (tmp_path / "figure5.png").is_file()
    for mode in ("termination", "no_termination"):
        assert set(res[mode]) == {"1", "3"}
        for entry in res[mode].values():
            assert 0.0 <= entry["final_generalization_error"] <= 1.0  # MSE of sigmoid outputs vs one-hot
    # the gate has a single expert for M = 1: both modes are the same run
    assert res["termination"]["1"]["final_forgetting"] == res["no_termination"]["1"]["final_forgetting"]


# ----------------------------------------------------------------- Fig. 2 sweep (issue 20)


@pytest.mark.parametrize("gap", [0.0, 0.16, 0.4])
def test_gap_layout_sets_the_within_cluster_infinity_norm_gap(gap):
    cfg = SynthConfig(T=20, gap=gap)
    data = make_data(cfg, [0, 1])
    for W in data.W:
        np.testing.assert_allclose(within_cluster_gaps(W, cfg.K), gap, atol=1e-12)
    default = make_data(SynthConfig(T=20), [0, 1])
    np.testing.assert_array_equal(data.tasks, default.tasks)       # same arrivals in every layout
    assert within_cluster_gaps(default.W[0], cfg.K).min() > 0.4     # the old default is far wider


def test_independent_layout_has_no_cluster_structure():
    cfg = SynthConfig(T=20, independent=True)
    W = make_data(cfg, [0]).W[0]
    centred = make_data(SynthConfig(T=20, gap=0.0), [0]).W[0]
    assert not np.allclose(W[0], W[cfg.K])                          # tasks 1 and 4 differ ...
    np.testing.assert_allclose(centred[0], centred[cfg.K])          # ... unlike the gap-0 layout
    assert abs(W.std() / cfg.sigma0 - 1) < 0.3


def test_quick_sweep_cli(tmp_path):
    res = moe_cl_sweep.main(["--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert (tmp_path / "sweep.png").stat().st_size > 10_000
    assert list(saved["layouts"]) == [label for label, _ in moe_cl_sweep.layouts()]
    for label, lay in res["layouts"].items():
        assert set(lay["termination"]) == {"5", "10"} and set(lay["no_termination"]) == {"5", "10"}
        single = lay["single_expert"]["G_T"]
        for by_gamma in lay["termination"].values():
            assert set(by_gamma) == {"s0^1", "s0^1.25"}
            for r in by_gamma.values():
                assert r["ratio_to_single"] == pytest.approx(r["G_T"] / single)
                split = r["G_T_split"]
                assert split["before"] + split["after_routed_ok"] + split["after_misrouted"] == pytest.approx(r["G_T"])
                assert 0.0 <= split["purity"] <= 1.0
                assert r["stop_round_mean"] is None or r["stop_round_mean"] > 10
    gap0 = res["layouts"]["gap 0"]
    assert gap0["within_cluster_gap_inf_max"] == 0.0
    # routing by cluster beats the single expert even in the quick run
    assert min(r["ratio_to_single"] for r in gap0["termination"]["5"].values()) < 0.6


def test_decompose_splits_g_t_by_round_type():
    errors = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    experts = np.array([0, 1, 0, 0, 0])
    clusters = np.array([0, 1, 0, 0, 1])        # rounds 2-4 go to expert 0, owned by cluster 0
    out = moe_cl_sweep.decompose(errors, experts, clusters, start=2)
    assert out["before"] == pytest.approx(3.0 / 5)
    assert out["after_routed_ok"] == pytest.approx(7.0 / 5)
    assert out["after_misrouted"] == pytest.approx(5.0 / 5)
    assert out["purity"] == pytest.approx(2 / 3)
