"""RanPAC (norga/methods/ranpac.py): the ridge classifier, its incremental update, the fixed projection, the
choice of lambda and per-sample predictions, each against a hand computation on a tiny input."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import build_run_parts, loaders_of
from norga.config import ConfigError, load_config
from norga.engine import evaluate_run, run_training
from norga.methods.base import TestBatch as Batch
from norga.methods.ranpac import random_features, ridge_solve, select_ridge
from norga.toolkit.stages import extract_features

RANPAC_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "ranpac.yaml"


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
