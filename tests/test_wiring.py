"""Tests that catch plausible miswirings of the pipeline, each of which an end-to-end FA threshold would miss.

Each test names the mutation it catches: TAP on the wrong statistics, statistics from augmented images,
lr scaling or the head's lr scale ignored, the regulariser's sign flipped, class-incremental prediction
using the true task's prompt instead of the TII-predicted one.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import norga.continual.evaluate as evaluate_module
import norga.continual.learner as learner_module
import norga.continual.stages as stages_module
from norga.config import load_config
from norga.continual.evaluate import evaluate_task
from norga.continual.heads import masked_logits
from norga.continual.learner import HiDeNoRGaLearner
from norga.continual.runner import build_data, build_model, task_loaders
from norga.continual.stages import extract_features

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"
FAST = ["tii.epochs=2", "tii.align_epochs=1", "wtp.epochs=1", "tap.epochs=1", "data.num_tasks=3"]


def _setup(overrides=()):
    cfg = load_config(SMOKE, FAST + list(overrides))
    model = build_model(cfg)
    bench = build_data(cfg, model)
    return cfg, bench, HiDeNoRGaLearner(model, bench.task_classes, cfg, torch.device("cpu"))


@pytest.fixture(scope="module")
def trained():
    """A learner after tasks 0 and 1, with the alignment calls it made recorded."""
    calls, original = [], learner_module.align_head

    def spy(head, store, *args, **kwargs):
        calls.append((args[8] if len(args) > 8 else kwargs.get("stage"), store))
        return original(head, store, *args, **kwargs)

    learner_module.align_head = spy
    try:
        cfg, bench, learner = _setup()
        for t in range(2):
            learner.learn_task(t, task_loaders(cfg, bench, t))
    finally:
        learner_module.align_head = original
    return cfg, bench, learner, calls


def test_tap_aligns_on_instructed_and_tii_on_uninstructed_statistics(trained):
    _, _, learner, calls = trained
    stores = {stage: store for stage, store in calls}
    assert stores["tap"] is learner.instructed and stores["tii_align"] is learner.uninstructed


def test_statistics_come_from_unaugmented_images_frozen_and_prompted(trained):
    cfg, bench, learner, _ = trained
    loader = task_loaders(cfg, bench, 1).train_plain  # test transform
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

    monkeypatch.setattr(stages_module.torch.optim, "Adam", recording_adam)
    cfg, bench, learner = _setup(["scale_lr_by_batch=true", "wtp.lr=0.04", "wtp.batch_size=32",
                                  "wtp.head_lr_scale=0.25", "tii.cache_features=true"])
    learner.learn_task(0, task_loaders(cfg, bench, 0))
    wtp_groups = [lrs for lrs in seen if len(lrs) == 2]
    assert wtp_groups == [[pytest.approx(0.04 * 32 / 256), pytest.approx(0.04 * 32 / 256 * 0.25)]]


@pytest.mark.parametrize("form", ["official", "eq56"])
def test_a_wtp_epoch_on_the_regulariser_alone_lowers_it(monkeypatch, form):
    """With the cross-entropy switched off, WTP's steps must descend the regulariser (catches a flipped sign)."""
    cfg, bench, learner = _setup([f"wtp.reg_form={form}", "wtp.reg=1.0", "wtp.lr=0.01", "wtp.epochs=2"])
    learner.learn_task(0, task_loaders(cfg, bench, 0))  # task 0 gives task 1 its prototypes
    monkeypatch.setattr(stages_module, "masked_cross_entropy", lambda logits, *a, **k: 0.0 * logits.sum())
    history = []
    original = stages_module.train_wtp

    def keep_history(*args, **kwargs):
        history.extend(original(*args, **kwargs))

    monkeypatch.setattr(learner_module, "train_wtp", keep_history)
    learner.learn_task(1, task_loaders(cfg, bench, 1))
    assert len(history) == 2 and history[1]["reg"] < history[0]["reg"]


def test_class_incremental_prediction_uses_the_tii_predicted_prompt(trained, monkeypatch):
    """TII forced to answer task 1 for task-0 samples: CIL must use prompt 1, TIL still prompt 0."""
    cfg, bench, learner, _ = trained
    prompts = learner.task_prompts.clone()
    prompts[1] = 10 * torch.randn(prompts[1].shape, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(evaluate_module, "predict_tasks", lambda head, frozen, seen, c2t: torch.ones(
        len(frozen), dtype=torch.long))
    loader = task_loaders(cfg, bench, 0).test
    seen = learner.seen_mask(1)
    e = evaluate_task(learner.model, learner.tii_head, learner.head, prompts, learner.class_to_task, 0, seen,
                      loader, torch.device("cpu"))

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
    e = evaluate_task(learner.model, learner.tii_head, head, learner.task_prompts, learner.class_to_task, 0,
                      learner.seen_mask(1), task_loaders(cfg, bench, 0).test, torch.device("cpu"))
    assert e.cil_unmasked_accuracy == 0.0 and e.cil_accuracy > 0.5
    authors = evaluate_task(learner.model, learner.tii_head, head, learner.task_prompts, learner.class_to_task,
                              0, learner.seen_mask(1), task_loaders(cfg, bench, 0).test, torch.device("cpu"),
                              mask_unseen=False)
    assert authors.cil_accuracy == 0.0
