"""Tests for the linear-vs-NoRGa estimation-rate simulation (theory.gating_rates.experiments*)."""
from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch

from norga.gates.modules import LinearGate, NoRGaGate

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))  # theory/ is beside norga/, not installed

from theory.gating_rates.experiments import (GATE_NAMES, METRICS, PARTS, Config, Suite, main, run,  # noqa: E402
                                             simulate_one_n)
from theory.gating_rates.fit import (default_box, fit_lm, init_atoms, split_moves, to_free,  # noqa: E402
                                     to_theta)
from theory.gating_rates.loss import (bootstrap_slope, loglog_slope, loss_eq17, loss_eq23,  # noqa: E402
                                      parameter_errors, voronoi_cells)
from theory.gating_rates.identifiability import (def42_functions, independence_ratio,  # noqa: E402
                                                 merge_coincident, pde_residual)
from theory.gating_rates.model import (default_truth, embed_truth, make_gate, pretrained_sums,  # noqa: E402
                                       regression_fn, regression_jacobian, sample_inputs,
                                       single_atom_truth)
from theory.gating_rates.omega import eq17_single_cell, measure_on_sphere, omega_ratio  # noqa: E402
from theory.gating_rates.paths import Grid, path_distances  # noqa: E402
from theory.gating_rates.twopoint import TwoPointConfig, closed_form, monte_carlo  # noqa: E402

D = 2
# true measure: two atoms, packed [beta1 (2), a (2), b]
W_STAR = np.array([1.0, 2.0])
ATOMS_STAR = np.array([[1.0, 0.0, 0.5, 0.5, 1.0],
                       [-1.0, 1.0, -0.5, 1.0, 0.0]])


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The CLI runs single-threaded; batched LM on 2 shared cores is several times slower with 2 threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------- Voronoi losses
def test_losses_vanish_for_identical_measures():
    assert loss_eq17(W_STAR, ATOMS_STAR, W_STAR, ATOMS_STAR, D) == 0.0
    for r in (1.0, 2.0):
        assert loss_eq23(W_STAR, ATOMS_STAR, W_STAR, ATOMS_STAR, D, r) == 0.0


def test_one_perturbed_atom_has_the_hand_computed_loss():
    atoms = ATOMS_STAR.copy()
    atoms[0, :2] += [0.3, 0.4]        # |d beta1| = 0.5
    atoms[0, 4] += 0.2                # |d eta| = 0.2 (through b)
    w = np.array([1.5, 2.0])          # mass mismatch 0.5 in cell 0
    # exactly-specified cell: w * (|d beta1| + |d eta|) + |w - w*|
    assert loss_eq17(w, atoms, W_STAR, ATOMS_STAR, D) == pytest.approx(1.5 * (0.5 + 0.2) + 0.5)
    assert loss_eq23(w, atoms, W_STAR, ATOMS_STAR, D, 2.0) == pytest.approx(0.5 + 1.5 * (0.25 + 0.04))
    assert loss_eq23(w, atoms, W_STAR, ATOMS_STAR, D, 1.0) == pytest.approx(0.5 + 1.5 * (0.5 + 0.2))


def test_over_specified_cell_uses_squared_distances():
    delta = 0.1
    atoms = np.vstack([ATOMS_STAR[0], ATOMS_STAR[0], ATOMS_STAR[1]])
    atoms[0, 4] += delta
    atoms[1, 4] -= delta
    w = np.array([0.5, 0.5, 2.0])
    assert [c.tolist() for c in voronoi_cells(atoms, ATOMS_STAR)] == [[0, 1], [2]]
    assert loss_eq17(w, atoms, W_STAR, ATOMS_STAR, D) == pytest.approx(delta ** 2)
    assert loss_eq23(w, atoms, W_STAR, ATOMS_STAR, D, 1.0) == pytest.approx(delta)
    errs = parameter_errors(w, atoms, W_STAR, ATOMS_STAR)
    assert errs["param_over"] == pytest.approx(delta) and errs["param_exact"] == 0.0


def test_empty_cell_costs_its_true_mass():
    atoms = np.vstack([ATOMS_STAR[0], ATOMS_STAR[0] + 0.01])
    w = np.array([0.5, 0.5])
    # cell 0: no mass mismatch, 0.5 * (5 coordinates * 0.01^2); cell 1 is empty: |0 - 2|
    assert loss_eq17(w, atoms, W_STAR, ATOMS_STAR, D) == pytest.approx(2.0 + 0.5 * 5 * 0.01 ** 2)


# ----------------------------------------------------------------- slopes
def test_slope_of_an_exact_power_law_and_its_bootstrap():
    ns = [100, 1000, 10000]
    per_n = [[3.0 * n ** -0.5] * 4 for n in ns]
    assert loglog_slope(ns, [v[0] for v in per_n]) == pytest.approx(-0.5)
    out = bootstrap_slope(ns, per_n, n_boot=50)
    assert out["slope"] == pytest.approx(-0.5)
    assert out["ci"][0] == pytest.approx(-0.5) and out["ci"][1] == pytest.approx(-0.5)


def test_bootstrap_interval_widens_with_scatter():
    rng = np.random.default_rng(1)
    ns = [100, 1000, 10000]
    per_n = [list(n ** -0.5 * np.exp(rng.normal(0, 0.5, size=6))) for n in ns]
    out = bootstrap_slope(ns, per_n, n_boot=300)
    assert out["ci"][0] < out["slope"] < out["ci"][1]


# ----------------------------------------------------------------- model / gates
def test_gates_are_the_package_gates_with_known_alpha_tau():
    assert isinstance(make_gate("linear"), LinearGate)
    g = make_gate("tanh", alpha=0.7, tau=2.0)
    assert isinstance(g, NoRGaGate) and not g.alpha.requires_grad
    z = torch.linspace(-2, 2, 9, dtype=torch.float64)
    assert torch.allclose(g(z), z + 0.7 * torch.tanh(2.0 * z))
    with pytest.raises(ValueError):
        make_gate("relu")


@pytest.mark.parametrize("gate_name", GATE_NAMES)
def test_analytic_jacobian_matches_autograd(gate_name):
    spec = default_truth()
    gate = make_gate(gate_name)
    gen = torch.Generator().manual_seed(0)
    X = sample_inputs(11, spec, gen, batch=2)
    P0, Q0 = pretrained_sums(X, spec)
    theta = 0.5 * torch.randn(2, 3, 2 * D + 2, generator=gen, dtype=torch.float64)
    g, J = regression_jacobian(X, P0, Q0, theta, gate, spec.phi)
    f = lambda t: regression_fn(X, P0, Q0, t.reshape(2, 3, -1), gate, spec.phi)  # noqa: E731
    full = torch.autograd.functional.jacobian(f, theta.reshape(2, -1))
    ref = torch.stack([full[b, :, b] for b in range(2)])
    assert torch.allclose(g, f(theta.reshape(2, -1)))
    assert torch.allclose(J, ref, atol=1e-12)


def test_linear_and_norga_truths_differ():
    spec = default_truth()
    X = sample_inputs(50, spec, torch.Generator().manual_seed(0))
    P0, Q0 = pretrained_sums(X, spec)
    star = spec.theta_star.unsqueeze(0)
    g_lin = regression_fn(X, P0, Q0, star, make_gate("linear"), spec.phi)
    g_tanh = regression_fn(X, P0, Q0, star, make_gate("tanh"), spec.phi)
    assert (g_lin - g_tanh).abs().max() > 1e-2


def test_embedded_truth_gives_the_same_regression_function():
    spec = default_truth()
    X = sample_inputs(40, spec, torch.Generator().manual_seed(1))
    P0, Q0 = pretrained_sums(X, spec)
    gate = make_gate("gelu")
    g_star = regression_fn(X, P0, Q0, spec.theta_star.unsqueeze(0), gate, spec.phi)
    g_emb = regression_fn(X, P0, Q0, embed_truth(spec, 4).unsqueeze(0), gate, spec.phi)
    assert torch.allclose(g_star, g_emb, atol=1e-12)


# ----------------------------------------------------------------- fitting
def test_reparametrisation_round_trip_and_box():
    lo, hi = default_box(D)
    v = torch.randn(5, 3, 2 * D + 2, dtype=torch.float64) * 10
    theta = to_theta(v, lo, hi)
    assert bool(((theta >= lo) & (theta <= hi)).all())
    inner = to_theta(torch.randn(4, 2 * D + 2, dtype=torch.float64), lo, hi)
    assert torch.allclose(to_theta(to_free(inner, lo, hi), lo, hi), inner)
    with pytest.raises(ValueError):
        default_box(D, beta0=(1.0, -1.0))


def test_noise_free_exactly_specified_fit_recovers_the_truth():
    spec = default_truth()
    gate = make_gate("tanh")
    lo, hi = default_box(D)
    gen = torch.Generator().manual_seed(3)
    X = sample_inputs(400, spec, gen)
    P0, Q0 = pretrained_sums(X, spec)
    y = regression_fn(X, P0, Q0, spec.theta_star.unsqueeze(0), gate, spec.phi)
    theta0 = init_atoms(spec, 2, 1, 0.15, gen, lo, hi)
    fit = fit_lm(X, y, P0, Q0, theta0, lo, hi, gate, spec.phi, max_iter=200, rtol=1e-14)
    assert torch.allclose(fit.theta[0], spec.theta_star, atol=1e-4)
    assert float(fit.sse[0]) < 1e-12


def test_split_moves_keep_the_regression_function_of_the_kept_atoms():
    spec = default_truth()
    gate = make_gate("sigmoid")
    X = sample_inputs(30, spec, torch.Generator().manual_seed(2))
    P0, Q0 = pretrained_sums(X, spec)
    theta = embed_truth(spec, 3).unsqueeze(0).clone()
    theta[0, 2] = torch.tensor([-1.5, 0.1, 0.1, 0.2, 0.2, 0.0], dtype=torch.float64)  # light junk atom
    moves = split_moves(theta)
    assert moves.shape == (1, 2, 3, theta.shape[-1])
    for c in range(2):
        kept = [j for j in range(3) if j != 2]
        j = kept[c]
        reference = theta[0, kept].clone().unsqueeze(0)      # measure without the junk atom
        g_ref = regression_fn(X, P0, Q0, reference, gate, spec.phi)
        g_move = regression_fn(X, P0, Q0, moves[:, c], gate, spec.phi)
        assert torch.allclose(g_ref, g_move, atol=1e-12), j


def test_fits_are_seeded_and_repeatable():
    cfg = Config.quick(ns=(100, 200), reps=2, gates=("tanh",))
    a = simulate_one_n("tanh", 100, 0, cfg)
    b = simulate_one_n("tanh", 100, 0, cfg)
    assert a["voronoi_eq17"] == b["voronoi_eq17"] and a["regression_l2"] == b["regression_l2"]


# ----------------------------------------------------------------- end to end
def test_quick_pipeline_end_to_end(tmp_path):
    suite = Suite.quick(ls=Config.quick(gates=("linear", "tanh"), ns=(100, 400)))
    results = run(suite, tmp_path, log=lambda *_: None)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert set(PARTS) <= set(on_disk) and set(on_disk["least_squares"]) == {"gelu", "affine"}
    assert (tmp_path / "rates.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "setup.json").read_text())["suite"]["ls"]["reps"] == suite.ls.reps
    for expert, by_gate in on_disk["least_squares"].items():
        assert set(by_gate) == {"linear", "tanh"}
        for gate, res in by_gate.items():
            assert res["n"] == list(suite.ls.ns)
            for m in METRICS:
                assert len(res["mean"][m]) == len(suite.ls.ns)
                assert all(len(v) == suite.ls.reps for v in res["values"][m])
            for m in ("voronoi_eq17", "voronoi_eq23_r1", "voronoi_eq23_r2", "regression_l2"):
                assert all(math.isfinite(v) for v in res["mean"][m]), (expert, gate, m)
            reg = res["mean"]["regression_l2"]
            assert reg[-1] < reg[0], f"{expert}/{gate}: regression error did not decrease with n: {reg}"
            assert sum(res["non_finite"]) == 0
    ident = results["identifiability"]
    assert set(ident["pairs"]) == {"affine", "poly", "relu", "gelu"}
    assert ident["pairs"]["affine"]["linear"]["paths"]["thm_a1"]["zero"]
    assert set(ident["omega"]) == {"linear", "tanh", "sigmoid"}
    tp = on_disk["two_point"]["linear"]["1.0"]
    assert len(tp["monte_carlo"]) == len(suite.two_point.ns_mc)
    assert len(tp["closed_form"]["power"]) == len(suite.two_point.ns_closed)


@pytest.mark.parametrize("argv, message", [
    (["--gates", "relu"], "unknown value"),
    (["--parts", "identifiability,fits"], "unknown value"),
    (["--experts", "tanh"], "unknown value"),
    (["--kappas", "0.1,x"], "comma-separated"),
    (["--mc-reps", "0"], "--mc-reps"),
    (["--ns", "100,abc"], "comma-separated integers"),
    (["--ns", "5,100"], ">= 20"),
    (["--ns", "100"], "at least two"),
    (["--reps", "1"], "--reps"),
])
def test_cli_rejects_bad_input(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        main(["--out", str(tmp_path / "o")] + argv)
    assert err.value.code == 2
    assert message in capsys.readouterr().err


def test_median_slope_ignores_one_outlier():
    ns = [100, 1000, 10000]
    per_n = [[n ** -0.5] * 5 for n in ns]
    per_n[-1][0] = 1e3                      # one wild replication at the largest n
    assert bootstrap_slope(ns, per_n, n_boot=20, stat="median")["slope"] == pytest.approx(-0.5)
    assert bootstrap_slope(ns, per_n, n_boot=20)["slope"] > 0
    with pytest.raises(ValueError):
        bootstrap_slope(ns, per_n, stat="mode")


# ----------------------------------------------------------------- identifiability (E1)


def _random_inputs(m=500, seed=0):
    return 2 * torch.rand(m, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) - 1


@pytest.mark.parametrize("expert", ["affine", "relu", "gelu"])
def test_pde_holds_for_the_linear_gate_and_fails_for_norga(expert):
    spec, X = single_atom_truth(expert), _random_inputs()
    assert pde_residual(spec, make_gate("linear"), X) < 1e-13
    for gate in ("tanh", "sigmoid"):
        assert pde_residual(spec, make_gate(gate), X) > 1e-2


def test_thm_a1_construction_is_invisible_for_affine_experts_under_both_gates():
    deltas = [1e-3, 1e-2, 1e-1]
    for gate in ("linear", "tanh"):
        affine = single_atom_truth("affine")
        assert path_distances("thm_a1", affine, make_gate(gate), Grid.make(affine, 10), deltas).max() < 1e-13
        gelu = single_atom_truth("gelu")         # not a null direction for a curved expert
        assert path_distances("thm_a1", gelu, make_gate(gate), Grid.make(gelu, 10), deltas).min() > 1e-8


def test_rescaling_family_is_exact_for_homogeneous_experts_only():
    deltas = [1e-2, 1e-1]
    for expert, zero in (("poly", True), ("relu", True), ("gelu", False)):
        spec = single_atom_truth(expert)
        dist = path_distances("rescale", spec, make_gate("tanh"), Grid.make(spec, 10), deltas)
        assert (dist.max() < 1e-13) == zero, (expert, dist)


def test_pde_direction_is_second_order_only_under_the_linear_gate():
    spec = single_atom_truth("affine")
    grid, deltas = Grid.make(spec, 10), [1e-3, 1e-2]
    slope = lambda g: loglog_slope(deltas, path_distances("pde", spec, make_gate(g), grid, deltas))  # noqa: E731
    assert slope("linear") == pytest.approx(2.0, abs=0.05)
    assert slope("tanh") == pytest.approx(1.0, abs=0.05)


def test_definition_4_2_checks():
    X = _random_inputs(2000, 1)
    for expert in ("affine", "poly", "relu"):   # zero function, Euler's identity, zero function
        merged, _ = merge_coincident(def42_functions(single_atom_truth(expert), make_gate("tanh"), X))
        assert independence_ratio(merged) < 1e-12, expert
    gelu = single_atom_truth("gelu")
    A = def42_functions(gelu, make_gate("tanh"), X)
    assert A.shape[1] == 21 and independence_ratio(A) < 1e-12      # X_1 dh/da_2 = X_2 dh/da_1
    merged, n_merged = merge_coincident(A)
    assert n_merged == 1 and independence_ratio(merged) > 1e-5
    assert merge_coincident(def42_functions(gelu, make_gate("linear"), X))[1] == 3  # + X_u dh/db = dh/da_u


def test_omega_parametrisation_has_the_requested_loss():
    spec = single_atom_truth("gelu")
    atom = spec.theta_star[0]
    for seed in range(3):
        x = torch.randn(2 * atom.numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        theta = measure_on_sphere(x, atom, 0.01, 0.2, 0.8)
        assert float(eq17_single_cell(theta, atom)) == pytest.approx(0.01, rel=1e-10)
    grid = Grid.make(spec, 8)
    res = omega_ratio(spec, make_gate("linear"), grid, 0.01, starts=2, maxiter=20)
    assert res["argmin_loss_eq17"] == pytest.approx(0.01, rel=1e-10) and res["argmin_inside_box"]
    assert res["ratio"] == pytest.approx(res["ratios_sorted"][0])          # the best start is reported
    first_step = omega_ratio(spec, make_gate("linear"), grid, 0.01, starts=2, maxiter=1)
    assert res["ratio"] < first_step["ratio"]                               # the minimiser moved downhill


@pytest.mark.parametrize("gate, kappa", [("linear", 1.0), ("tanh", 0.03)])
def test_two_point_closed_form_matches_monte_carlo(gate, kappa):
    cfg = TwoPointConfig(reps=300, log2_points=12)
    spec = single_atom_truth("affine")
    cf = closed_form(gate, kappa, [2000], cfg, Grid.make(spec, 12))["power"][0]
    mc = monte_carlo(gate, kappa, 2000, cfg, seed=5)
    assert 0.1 < cf < 0.9                                   # a power where the comparison means something
    assert abs(mc["power"] - cf) < 4 * math.sqrt(cf * (1 - cf) / cfg.reps)
    assert abs(mc["level"] - cfg.alpha) < 4 * math.sqrt(cfg.alpha * (1 - cfg.alpha) / cfg.reps)
