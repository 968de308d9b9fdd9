"""Tests that catch plausible miswirings of the pipeline, each of which an end-to-end FA threshold would miss.

Each test names the mutation it catches: TAP on the wrong statistics, statistics from augmented images,
lr scaling or the head's lr scale ignored, the regulariser's sign flipped, class-incremental prediction
using the true task's prompt instead of the TII-predicted one.
"""
from __future__ import annotations

import pytest
import torch

import norga.toolkit.training as training_module
import norga.methods.hide_stages as hide_stages_module  # TII and TAP alignments (align_head) run there
from conftest import SMOKE, build_run_parts, loaders_of
from norga.config import load_config
from norga.engine.evaluate import evaluate_task
from norga.toolkit.heads import class_mask, masked_logits
from norga.toolkit.stages import REGULARISERS, extract_features

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")

FAST = ["method.tii.epochs=2", "method.tii.align_epochs=1", "method.wtp.epochs=1", "method.tap.epochs=1",
        "data.num_tasks=3"]


def _setup(overrides=()):
    return build_run_parts(load_config(SMOKE, FAST + list(overrides)))


def _seen(learner, task):
    return class_mask(learner.num_classes, learner.seen_classes(task))


@pytest.fixture(scope="module")
def trained():
    """A learner after tasks 0 and 1, with the alignment calls it made recorded."""
    calls, original = [], hide_stages_module.align_head

    def spy(head, store, *args, **kwargs):
        calls.append((args[8] if len(args) > 8 else kwargs.get("stage"), store))
        return original(head, store, *args, **kwargs)

    hide_stages_module.align_head = spy
    try:
        cfg, bench, learner = _setup()
        for t in range(2):
            learner.learn_task(t, loaders_of(cfg, bench, learner, t))
    finally:
        hide_stages_module.align_head = original
    return cfg, bench, learner, calls


def test_tap_aligns_on_instructed_and_tii_on_uninstructed_statistics(trained):
    _, _, learner, calls = trained
    stores = {stage: store for stage, store in calls}
    assert stores["tap"] is learner.instructed and stores["tii_align"] is learner.uninstructed


def test_statistics_come_from_unaugmented_images_frozen_and_prompted(trained):
    cfg, bench, learner, _ = trained
    loader = loaders_of(cfg, bench, learner, 1).train_plain  # test transform
    frozen, labels = extract_features(learner.model, loader, "cpu")
    prompted, _ = extract_features(learner.model, loader, "cpu", learner.task_prompts[1])
    c = bench.task_classes[1][0]
    assert torch.allclose(learner.uninstructed.stats[c]["mean"].float(), frozen[labels == c].mean(0), atol=1e-5)
    assert torch.allclose(learner.instructed.stats[c]["mean"].float(), prompted[labels == c].mean(0), atol=1e-5)
    assert not torch.allclose(frozen[labels == c].mean(0), prompted[labels == c].mean(0), atol=1e-3)


def test_wtp_learning_rates_follow_batch_scaling_and_head_scale(monkeypatch):
    seen = []
    original = torch.optim.Adam

    def recording_adam(groups, *args, **kwargs):
        optimizer = original(groups, *args, **kwargs)
        seen.append([g["lr"] for g in optimizer.param_groups])
        return optimizer

    monkeypatch.setattr(torch.optim, "Adam", recording_adam)
    cfg, bench, learner = _setup(["method.scale_lr_by_batch=true", "method.wtp.lr=0.04", "method.wtp.batch_size=32",
                                  "method.wtp.head_lr_scale=0.25", "method.tii.cache_features=true"])
    learner.learn_task(0, loaders_of(cfg, bench, learner, 0))
    wtp_groups = [lrs for lrs in seen if len(lrs) == 2]
    assert wtp_groups == [[pytest.approx(0.04 * 32 / 256), pytest.approx(0.04 * 32 / 256 * 0.25)]]


@pytest.mark.parametrize("form", ["official", "eq56"])
def test_a_wtp_epoch_on_the_regulariser_alone_lowers_it(monkeypatch, form):
    """With the cross-entropy switched off, WTP must descend the regulariser (catches a flipped sign anywhere):
    the regulariser recomputed here, outside the method, on a fixed batch with the initial and the trained prompt."""
    cfg, bench, learner = _setup([f"method.wtp.reg_form={form}", "method.wtp.reg=1.0", "method.wtp.lr=0.01",
                                  "method.wtp.epochs=2"])
    learner.learn_task(0, loaders_of(cfg, bench, learner, 0))  # task 0 gives task 1 its prototypes
    monkeypatch.setattr(training_module, "masked_cross_entropy", lambda logits, *a, **k: 0.0 * logits.sum())
    learner.learn_task(1, loaders_of(cfg, bench, learner, 1))
    assert all(h["ce"] == 0.0 for h in learner.wtp_history)
    m = cfg.method.wtp.momentum
    earlier = learner.pool.prompts[0].detach()
    x, _ = next(iter(loaders_of(cfg, bench, learner, 1).train_plain))
    prototypes = learner.instructed.means(bench.task_classes[0])
    regulariser = REGULARISERS[form]

    def value(e_t):
        with torch.no_grad():
            feats = learner.model(x, (1 - m) * e_t + m * earlier)
            return float(regulariser(feats, prototypes, cfg.method.wtp.temperature))

    assert value(learner.wtp_end) < value(learner.wtp_start)


class AlwaysClass(torch.nn.Module):
    """A TII head that predicts class ``c`` for every sample (so the task of ``c``)."""

    def __init__(self, c: int, num_classes: int):
        super().__init__()
        self.c, self.num_classes = c, num_classes

    def forward(self, feats):
        logits = torch.zeros(len(feats), self.num_classes)
        logits[:, self.c] = 1.0
        return logits


def test_class_incremental_prediction_uses_the_tii_predicted_prompt(trained, monkeypatch):
    """TII forced to answer task 1 for task-0 samples: CIL must use prompt 1, TIL still prompt 0."""
    cfg, bench, learner, _ = trained
    prompts = learner.task_prompts.clone()
    prompts[1] = 10 * torch.randn(prompts[1].shape, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(learner, "task_prompts", prompts)
    monkeypatch.setattr(learner, "tii_head", AlwaysClass(bench.task_classes[1][0], learner.num_classes))
    loader = loaders_of(cfg, bench, learner, 0).test
    seen = _seen(learner, 1)
    e = evaluate_task(learner, 0, seen, loader, torch.device("cpu"))

    def accuracy(prompt, allowed):
        feats, labels = extract_features(learner.model, loader, "cpu", prompt)
        return (masked_logits(learner.head(feats), allowed).argmax(1) == labels).float().mean().item()

    wrong, right = accuracy(prompts[1], seen), accuracy(prompts[0], seen)
    assert wrong < right - 0.1  # precondition: the wrong prompt really hurts
    assert e.tii_accuracy == 0.0
    assert e.cil_accuracy == pytest.approx(wrong, abs=1e-6)
    assert e.til_accuracy == pytest.approx(accuracy(prompts[0], learner.class_to_task == 0), abs=1e-6)


def test_unmasked_evaluation_lets_unseen_classes_compete(trained):
    """The authors' evaluation (every class's logit competes) vs ours (seen classes only), on one head."""
    cfg, bench, learner, _ = trained
    head = torch.nn.Linear(learner.head.in_features, learner.head.out_features)
    head.load_state_dict(learner.head.state_dict())
    unseen = bench.task_classes[2][0]
    with torch.no_grad():
        head.bias[unseen] = 1e4  # an untrained row of a future class that wins every argmax
    learner.head, trained_head = head, learner.head
    try:
        test = loaders_of(cfg, bench, learner, 0).test
        e = evaluate_task(learner, 0, _seen(learner, 1), test, torch.device("cpu"))
        authors = evaluate_task(learner, 0, _seen(learner, 1), test, torch.device("cpu"), mask_unseen=False)
    finally:
        learner.head = trained_head
    assert e.cil_unmasked_accuracy == 0.0 and e.cil_accuracy > 0.5
    assert authors.cil_accuracy == 0.0
