"""RanPAC (norga/methods/ranpac.py): the ridge classifier, its incremental update, the fixed projection, the
choice of lambda and per-sample predictions, each against a hand computation on a tiny input; and the optional
first session (method.first_session): the tuning trains on task 0 only, and every feature, statistic and logit
afterwards is recomputed by hand through the adapted blocks."""
from __future__ import annotations

from pathlib import Path

import json

import pytest
import torch

from conftest import (adapted_by_hand, assert_predictions_per_sample, assert_reevaluation_identical, build_run_parts,
                      loaders_of, timm_features)
from norga.config import ConfigError, load_config
from norga.engine import evaluate_run, run_training
from norga.methods.base import TestBatch as Batch
from norga.methods.adapter_stage import TunedView
from norga.methods.ranpac import random_features, ridge_family, ridge_solve, select_ridge
from norga.models.adapters import wrappers
from norga.toolkit.stages import extract_features

RANPAC_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "ranpac.yaml"
FIRST = "method.first_session."
ADAPTER = [FIRST + "tuning=adapter", FIRST + "bottleneck=8", FIRST + "epochs=2", FIRST + "batch_size=8",
           FIRST + "lr=0.05"]  # the adapted smoke run: adapters of width 8 on both blocks, 2 epochs on task 0


def test_ridge_solve_is_the_closed_form_on_a_2x2_case():
    gram = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    targets = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    # (G + 1 I) = [[3, 1], [1, 4]], det 11, inverse [[4, -1], [-1, 3]] / 11 -> W_o = [[2], [5]] / 11
    assert torch.allclose(ridge_solve(gram, targets, 1.0), torch.tensor([[2.0], [5.0]], dtype=torch.float64) / 11)


def test_random_features_are_relu_of_the_projection():
    feats, proj = torch.tensor([[1.0, -2.0]]), torch.tensor([[1.0, 0.0, 2.0], [1.0, 1.0, 0.5]])
    assert random_features(feats, proj, "relu").tolist() == [[0.0, 0.0, 1.0]]
    assert random_features(feats, proj, "identity").tolist() == [[-1.0, -2.0, 1.0]]


@pytest.fixture(scope="module")
def ranpac_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "ranpac"
    cfg = load_config(RANPAC_SMOKE)
    return cfg, out, run_training(cfg, out)


def _all_train(cfg, bench, method):
    feats, labels = zip(*(extract_features(method.model, loaders_of(cfg, bench, method, t).train_plain, "cpu")
                          for t in range(3)))
    return torch.cat(feats), torch.cat(labels)


def test_incremental_ridge_equals_a_batch_solve_on_all_data(ranpac_run):
    """The Gram matrix and C summed task by task equal those of all tasks at once; W_o = (G + lambda I)^-1 C."""
    cfg, out, metrics = ranpac_run
    _, bench, method = build_run_parts(cfg)
    state = torch.load(out / "checkpoints" / "task_02.pt", weights_only=True)["method"]
    feats, labels = _all_train(cfg, bench, method)
    h = torch.relu(feats.double() @ method.projection.double())
    y = torch.nn.functional.one_hot(labels, method.num_classes).double()
    gram, targets = h.T @ h, h.T @ y
    ridge = metrics["method"]["ridges"][-1]
    head = torch.linalg.inv(gram + ridge * torch.eye(len(gram), dtype=torch.float64)) @ targets
    assert torch.allclose(state["gram"], gram, rtol=1e-9, atol=1e-6)
    assert torch.allclose(state["targets"], targets, rtol=1e-9, atol=1e-6)
    assert torch.allclose(state["head"], head, rtol=1e-5, atol=1e-6)
    for task in range(3):  # final accuracies recomputed from the batch solve
        test_feats, test_labels = extract_features(method.model, loaders_of(cfg, bench, method, task).test, "cpu")
        logits = torch.relu(test_feats.double() @ method.projection.double()) @ head
        acc = (logits.argmax(1) == test_labels).double().mean().item()
        assert metrics["acc_matrix"][task][2] == pytest.approx(acc, abs=1e-9)


def test_incremental_update_by_hand():
    """Two tasks summed into G and C give the same W_o as one solve on both (tiny input, every lambda)."""
    gen = torch.Generator().manual_seed(0)
    h1, h2 = torch.rand(5, 3, generator=gen, dtype=torch.float64), torch.rand(4, 3, generator=gen, dtype=torch.float64)
    y1 = torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 1, 0]), 4).double()
    y2 = torch.nn.functional.one_hot(torch.tensor([2, 3, 2, 3]), 4).double()
    gram, targets = h1.T @ h1 + h2.T @ h2, h1.T @ y1 + h2.T @ y2
    h, y = torch.cat([h1, h2]), torch.cat([y1, y2])
    for ridge in (1e-3, 1.0, 10.0):
        batch = torch.linalg.inv(h.T @ h + ridge * torch.eye(3, dtype=torch.float64)) @ (h.T @ y)
        assert torch.allclose(ridge_solve(gram, targets, ridge), batch, atol=1e-10)


def test_select_ridge_by_hand():
    """1-d case: fit on the first part of the permutation, mean squared error on the rest, least one wins."""
    h = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0]], dtype=torch.float64)
    y = torch.tensor([[1.0], [2.0], [3.0], [4.0], [0.0]], dtype=torch.float64)
    ridges = [1e-8, 1.0, 10.0, 100.0]
    gen = torch.Generator().manual_seed(6)
    order = torch.randperm(5, generator=torch.Generator().manual_seed(6))
    assert order[4] == 4  # seed 6 holds out the sample off the line
    fit, val = order[:4], order[4:]
    losses = []
    for r in ridges:
        w = (h[fit] * y[fit]).sum() / ((h[fit] ** 2).sum() + r)  # scalar ridge by hand
        losses.append(((h[val] * w - y[val]) ** 2).mean().item())
    expected = ridges[losses.index(min(losses))]
    assert select_ridge(h, y, ridges, 0.2, gen) == expected
    # a held-out sample off the line (label 0 at h=5) wants heavy shrinkage; on the line, the least ridge wins
    assert expected == 100.0  # the fitting part alone would want the least ridge
    y_line = h.clone()
    assert select_ridge(h, y_line, ridges, 0.2, torch.Generator().manual_seed(6)) == 1e-8


def _select_by_solves(h, y, ridges, val_fraction, generator):
    """The λ choice as it was before ridge_family: one (M, M) linear solve per candidate."""
    order = torch.randperm(h.shape[0], generator=generator)
    n_fit = int(h.shape[0] * (1.0 - val_fraction))
    fit, val = order[:n_fit], order[n_fit:]
    gram, targets = h[fit].T @ h[fit], h[fit].T @ y[fit]
    losses = [(h[val] @ ridge_solve(gram, targets, r) - y[val]).pow(2).mean().item() for r in ridges]
    return ridges[losses.index(min(losses))]


@pytest.mark.parametrize("n,m", [(40, 200), (300, 30)])  # kernel side (N < M) and Gram side (N >= M)
def test_one_eigendecomposition_equals_a_solve_per_ridge(n, m):
    """W_λ from one decomposition = torch.linalg.solve((HᵀH + λI), HᵀY) for every λ, and the same λ wins."""
    gen = torch.Generator().manual_seed(n)
    h = torch.relu(torch.randn(n, m, generator=gen, dtype=torch.float64))
    y = torch.nn.functional.one_hot(torch.randint(0, 5, (n,), generator=gen), 5).double()
    e, left, right = ridge_family(h, y)
    assert left.shape == (m, min(n, m)) and right.shape == (min(n, m), 5)
    eye = torch.eye(m, dtype=torch.float64)
    for ridge in (1e-2, 1.0, 1e2, 1e4):
        solved = torch.linalg.solve(h.T @ h + ridge * eye, h.T @ y)
        assert torch.allclose((left / (e + ridge)) @ right, solved, rtol=1e-9, atol=1e-12)
    ridges = [10.0 ** k for k in range(-8, 9)]
    for seed in range(5):
        chosen = select_ridge(h, y, ridges, 0.2, torch.Generator().manual_seed(seed))
        assert chosen == _select_by_solves(h, y, ridges, 0.2, torch.Generator().manual_seed(seed))


def test_projection_is_fixed_across_tasks_and_resume(ranpac_run, tmp_path):
    cfg, out, metrics = ranpac_run
    _, _, method = build_run_parts(cfg)
    states = [torch.load(p, weights_only=True) for p in sorted((out / "checkpoints").glob("*.pt"))]
    projections = [s["method"]["projection"] for s in states]
    assert len(projections) == 3 and all(torch.equal(p, method.projection) for p in projections)
    assert len(metrics["method"]["ridges"]) == 3
    again = evaluate_run(out)  # re-evaluable from the saved state
    assert again["acc_matrix"] == metrics["acc_matrix"]
    other = build_run_parts(load_config(RANPAC_SMOKE, ["seed=7"]))[2]
    assert not torch.equal(other.projection, method.projection)  # drawn from the run seed


def test_predictions_are_per_sample(ranpac_run):
    cfg, out, _ = ranpac_run
    _, bench, method = build_run_parts(cfg)
    state = torch.load(sorted((out / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    method.load_state_dict(state["method"], with_training_state=False)
    images, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    seen = method.seen_mask(2).cpu()
    whole = method.predict(Batch(images, 0, torch.arange(len(images)), len(images), seen)).logits
    for i in range(len(images)):
        one = method.predict(Batch(images[i:i + 1], 0, torch.tensor([i]), len(images), seen)).logits
        assert torch.allclose(one, whole[i:i + 1], atol=1e-5)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.val_fraction"):
        load_config(RANPAC_SMOKE, ["method.val_fraction=1.0"])
    with pytest.raises(ConfigError, match="method.ridges"):
        load_config(RANPAC_SMOKE, ["method.ridges=[]"])
    with pytest.raises(ConfigError, match="method.first_session.tuning"):
        load_config(RANPAC_SMOKE, [FIRST + "tuning=lora"])
    with pytest.raises(ConfigError, match="method.first_session.min_lr"):
        load_config(RANPAC_SMOKE, [FIRST + "min_lr=1.0"])


# ---- the first session (phase 1) -------------------------------------------------------------------------------


def test_without_a_first_session_nothing_is_wrapped_or_saved(ranpac_run):
    """The default (tuning: none) attaches no tuning: the features are timm's frozen ones, no tuning is saved."""
    cfg, out, metrics = ranpac_run
    assert cfg.method.first_session.tuning == "none"
    _, bench, method = build_run_parts(cfg)
    assert method.tuned is None and not list(wrappers(method.model))
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    vit = method.model.vit.eval()
    with torch.no_grad():
        assert torch.equal(method.model(x), timm_features(vit, x))
    state = torch.load(out / "checkpoints" / "task_02.pt", weights_only=True)["method"]
    assert "tuned" not in state and "first_session" not in metrics["method"]
    assert not (out / "epochs.jsonl").exists() or "ranpac" not in (out / "epochs.jsonl").read_text()


@pytest.fixture(scope="module")
def adapted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "ranpac_adapter"
    cfg = load_config(RANPAC_SMOKE, ADAPTER)
    return cfg, out, run_training(cfg, out)


def _states(out):
    return [torch.load(p, weights_only=True)["method"] for p in sorted((out / "checkpoints").glob("task_*.pt"))]


def test_the_first_session_trains_on_task_0_only(adapted_run):
    cfg, out, metrics = adapted_run
    _, _, fresh = build_run_parts(cfg)
    states = _states(out)
    init = fresh.tuned.state_dict()
    assert len(states) == 3 and set(states[0]["tuned"]) == set(init)
    assert any(not torch.equal(init[k], states[0]["tuned"][k]) for k in init if "up.weight" in k)  # task 0 trained
    for later in states[1:]:
        assert all(torch.equal(states[0]["tuned"][k], later["tuned"][k]) for k in init)
    log = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert {row["task"] for row in log if row["stage"] == "ranpac"} == {0}
    assert len([row for row in log if row["stage"] == "ranpac"]) == cfg.method.first_session.epochs
    assert metrics["method"]["first_session"] == "adapter" and metrics["method"]["tuned_layers"] == [0, 1]


def _by_hand(method, state, images):
    """Adapted features (N, D) of ``images`` from the written-out blocks with the saved adapters."""
    adapters = [{k.split(".", 2)[2]: v for k, v in state["tuned"].items() if k.startswith(f"{i}.0.")}
                for i in range(len(method.model.vit.blocks))]
    with torch.no_grad():
        return adapted_by_hand(method.model.vit.eval(), images, adapters, 0.1)


def test_features_statistics_and_logits_come_from_the_adapted_backbone(adapted_run):
    """G, C and W_o equal a batch solve on features recomputed through the adapters by hand; the projection is the
    no-adaptation run's (drawn from the seed, untouched by phase 1); test logits are h(adapted) W_o."""
    cfg, out, metrics = adapted_run
    _, bench, method = build_run_parts(cfg)
    states = _states(out)
    final = states[-1]
    xs, ys = zip(*(b for t in range(3) for b in loaders_of(cfg, bench, method, t).train_plain))
    feats, labels = _by_hand(method, final, torch.cat(xs)), torch.cat(ys)
    with torch.no_grad():
        frozen = timm_features(method.model.vit.eval(), torch.cat(xs))
    assert not torch.allclose(feats, frozen, atol=1e-3)  # the adapters change the features
    plain = build_run_parts(load_config(RANPAC_SMOKE))[2]
    assert all(torch.equal(s["projection"], plain.projection) for s in states)
    h = torch.relu(feats.double() @ plain.projection.double())
    y = torch.nn.functional.one_hot(labels, method.num_classes).double()
    gram, targets = h.T @ h, h.T @ y
    eye = torch.eye(len(gram), dtype=torch.float64)
    head = torch.linalg.inv(gram + metrics["method"]["ridges"][-1] * eye) @ targets
    assert torch.allclose(final["gram"], gram, rtol=1e-6, atol=1e-4)
    assert torch.allclose(final["targets"], targets, rtol=1e-6, atol=1e-4)
    assert torch.allclose(final["head"], head, rtol=1e-4, atol=1e-5)
    method.load_state_dict(final, with_training_state=False)
    images, _ = next(iter(loaders_of(cfg, bench, method, 1).test))
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    logits = method.predict(Batch(images, 1, torch.arange(len(images)), len(images), seen)).logits
    by_hand = (torch.relu(_by_hand(method, final, images).double() @ plain.projection.double()) @ head).float()
    assert torch.allclose(logits, by_hand, rtol=1e-4, atol=1e-4)


def test_the_adapted_run_keeps_the_contract(adapted_run):
    """Per-sample predictions and identical re-evaluation from the checkpoints (the contract tests' checks)."""
    cfg, out, metrics = adapted_run
    assert_predictions_per_sample(cfg, out, 2)
    assert_reevaluation_identical(out, metrics)


@pytest.mark.parametrize("kind", ["vpt_deep", "ssf"])
def test_prompts_and_ssf_train_on_task_0_and_only_they_move(kind, tmp_path):
    """The tuning moves in task 0 only; the untouched backbone of a fresh build with the saved tuning switched on
    reproduces the run's Gram matrix (so no backbone weight trained, and the features are the tuned ones)."""
    cfg = load_config(RANPAC_SMOKE, [FIRST + f"tuning={kind}", FIRST + "epochs=1", FIRST + "batch_size=8",
                                     FIRST + "lr=0.05"])
    run_training(cfg, tmp_path / kind)
    _, bench, fresh = build_run_parts(cfg)
    states = _states(tmp_path / kind)
    init = fresh.tuned.state_dict()
    assert any(not torch.equal(init[k], states[0]["tuned"][k]) for k in init)
    assert all(torch.equal(states[0]["tuned"][k], states[2]["tuned"][k]) for k in init)
    fresh.load_state_dict(states[2])
    feats = torch.cat([extract_features(TunedView(fresh.model, 0), loaders_of(cfg, bench, fresh, t).train_plain,
                                        "cpu")[0] for t in range(3)])
    h = torch.relu(feats.double() @ fresh.projection.double())
    assert torch.allclose(states[2]["gram"], h.T @ h, rtol=1e-6, atol=1e-4)
    frozen = torch.cat([extract_features(fresh.model, loaders_of(cfg, bench, fresh, t).train_plain, "cpu")[0]
                        for t in range(3)])
    assert not torch.allclose(feats, frozen, atol=1e-4)
