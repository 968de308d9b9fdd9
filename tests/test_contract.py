"""The contract every registered method keeps, checked for each one the registry holds (nothing to edit here
when a method is added: it needs its smoke config, ``configs/smoke/<name>.yaml``).

* a test sample's prediction depends on that sample only: alone, among other batch-mates, and at evaluation
  batch sizes 1 and 64 it gets the same logits, the same true-task logits and the same inferred task;
* evaluating the run again from its checkpoints gives the run's own accuracy matrices;
* a run killed in its evaluation and resumed ends with the uninterrupted run's metrics (slow);
* every shipped config loads and names a registered method.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import (REPO_ROOT, SMOKE, assert_predictions_per_sample, assert_reevaluation_identical,
                      load_run_method, loaders_of, shared_smoke_run)
from faults import assert_kill_then_resume_matches
from norga.config import load_config, method_configs
from norga.methods.base import Prediction
from norga.methods.base import TestBatch as Batch

METHODS = sorted(method_configs())
SMOKE_DIR = REPO_ROOT / "configs" / "smoke"


def smoke_config(method: str) -> Path:
    path = SMOKE_DIR / f"{method}.yaml"
    assert path.is_file(), (f"method {method!r} has no smoke config: add {path.relative_to(REPO_ROOT)} (base: "
                            "../smoke.yaml and a small method section) so the contract tests can train it")
    return path


@pytest.fixture(scope="module", params=METHODS)
def method_run(request, tmp_path_factory):
    """(name, cfg, run folder, metrics) of the method's smoke run, trained once per test run (shared with
    test_export and every xdist worker: ``conftest.shared_smoke_run``); read only."""
    return (request.param, *shared_smoke_run(tmp_path_factory, smoke_config(request.param)))


def predict_in_batches(method, x: torch.Tensor, task: int, order: torch.Tensor, batch: int) -> Prediction:
    """Predictions of the samples ``x`` (N, 3, H, W) taken in ``order`` and batches of ``batch``, returned in the
    samples' own order; each sample keeps its position in the test set as its index (the cache key)."""
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    parts, cache = [], method.new_eval_cache()
    for start in range(0, len(order), batch):
        index = order[start:start + batch]
        parts.append((index, method.predict(Batch(x[index], task, index, len(x), seen), cache)))
    index = torch.cat([i for i, _ in parts])
    back = torch.empty_like(index)
    back[index] = torch.arange(len(index))
    logits = torch.cat([p.logits for _, p in parts])[back]
    true = torch.cat([p.true_task_logits for _, p in parts])[back]
    tasks = None if parts[0][1].task_ids is None else torch.cat([p.task_ids for _, p in parts])[back]
    return Prediction(logits, true, tasks)


def assert_same_predictions(a: Prediction, b: Prediction, what: str) -> None:
    assert torch.allclose(a.logits, b.logits, atol=1e-5), f"{what}: class-incremental logits differ"
    assert torch.equal(a.logits.argmax(1), b.logits.argmax(1)), f"{what}: predicted classes differ"
    assert torch.allclose(a.true_task_logits, b.true_task_logits, atol=1e-5), f"{what}: true-task logits differ"
    assert (a.task_ids is None) == (b.task_ids is None), what
    if a.task_ids is not None:
        assert torch.equal(a.task_ids, b.task_ids), f"{what}: inferred tasks differ"


@pytest.mark.integration
def test_predictions_do_not_depend_on_batch_size_or_batch_mates(method_run):
    name, cfg, out, _ = method_run
    _, bench, method = load_run_method(out)
    task = method.num_tasks - 1
    x = torch.cat([b[0] for b in loaders_of(cfg, bench, method, task).test])
    natural = torch.arange(len(x))
    by_64 = predict_in_batches(method, x, task, natural, 64)
    assert_same_predictions(predict_in_batches(method, x, task, natural, 1), by_64, f"{name}: batch 1 vs 64")
    mixed = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))  # other batch-mates, other order
    assert_same_predictions(predict_in_batches(method, x, task, mixed, 5), by_64, f"{name}: other batch-mates")
    assert_predictions_per_sample(cfg, out, task)


@pytest.mark.integration
def test_evaluation_from_checkpoints_is_identical(method_run):
    name, _, out, metrics = method_run
    assert metrics["completed_tasks"] == metrics["num_tasks"] == 3
    assert metrics["method"]["name"] == name
    assert_reevaluation_identical(out, metrics, ("acc_matrix", "til_acc_matrix", "tii_accuracy", "tii_acc_matrix"))


@pytest.mark.slow
def test_a_run_killed_in_its_evaluation_resumes_to_the_uninterrupted_metrics(method_run, tmp_path):
    name, _, reference, _ = method_run  # the uninterrupted run: this module's smoke run of the method
    config = smoke_config(name)
    assert_kill_then_resume_matches(lambda out: ["--config", str(config), "--output-dir", str(out)],
                                    "bar:evaluation:1", tmp_path, reference)


CONFIGS = sorted(p for p in (REPO_ROOT / "configs").rglob("*.yaml")  # regime: a list; reproduce/: manifests
                 if p.name != "regime.yaml"
                 and p.parent.name not in ("reproduce", "sweeps", "tune"))  # sweeps/, tune/: test_sweep, test_tune


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO_ROOT / "configs")) for p in CONFIGS])
def test_every_shipped_config_loads_and_names_a_registered_method(path):
    cfg = load_config(path)
    assert cfg.method.name in METHODS and cfg.data.num_tasks >= 1
    named = [m for m in METHODS if path.stem == m or path.stem.endswith(f"_{m}")]
    if named:  # a file named after a method runs that method
        assert cfg.method.name == max(named, key=len)


def test_every_benchmark_regime_file_names_arms_that_load():
    from bench.regimes import REGIMES

    assert set(REGIMES) == {p.parent.name for p in (REPO_ROOT / "configs").rglob("regime.yaml")}
    for regime in REGIMES.values():
        assert regime.arms and all(regime.arm_config(a).is_file() for a in regime.all_arms())


def test_every_registered_method_has_a_smoke_config():
    assert {p.stem for p in SMOKE_DIR.glob("*.yaml")} == set(METHODS)


def test_the_batch_checker_catches_a_prediction_that_mixes_in_its_batch_mates():
    """A predictor whose output leaks the batch (the batch mean added to every logit) fails the check."""

    class Leaky:
        num_classes = 3

        def new_eval_cache(self):
            return None

        def predict(self, batch, cache):
            logits = batch.images.flatten(1)[:, :3]
            leaked = logits + logits.mean(0, keepdim=True)
            return Prediction(leaked, leaked)

    x = torch.randn(10, 3, 2, 2)
    order = torch.arange(10)
    by_64 = predict_in_batches(Leaky(), x, 0, order, 64)
    with pytest.raises(AssertionError, match="batch 1 vs 64"):
        assert_same_predictions(predict_in_batches(Leaky(), x, 0, order, 1), by_64, "leaky: batch 1 vs 64")
    assert SMOKE.is_file()
