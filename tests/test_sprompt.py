"""S-Prompt (one common head): nearest-centroid task selection by hand, frozen old prompts, K-means centroids,
per-sample predictions, prompt-token placement, and a run that resumes and re-evaluates identically."""
from __future__ import annotations


import pytest
import torch

from conftest import (assert_predictions_per_sample, build_run_parts,
                      checkpoint_method_state, load_run_method, loaders_of)
from faults import assert_kill_then_resume_matches, tiny_method_args
from norga.config import ConfigError, load_config
from norga.engine import run_training
from norga.toolkit.stages import extract_features
from norga.methods.base import TestBatch as Batch
from norga.methods.sprompt import nearest_centroid_task
from conftest import SMOKE, SPROMPT


def tiny_args(out) -> list:
    return tiny_method_args(out, SPROMPT[0])


def test_nearest_centroid_by_hand_l1_and_l2_disagree():
    """q = (0, 0); task 0 has centroids (3, 0) and (9, 9), task 1 has (2, 2) and (-8, 8).
    L1: task 0 at 3 < task 1 at 4. L2: task 1 at √8 ≈ 2.83 < task 0 at 3."""
    centroids = torch.tensor([[[3.0, 0.0], [9.0, 9.0]], [[2.0, 2.0], [-8.0, 8.0]]])
    q = torch.tensor([[0.0, 0.0], [2.1, 2.0], [9.0, 8.0]])
    assert nearest_centroid_task(q, centroids, "l1").tolist() == [0, 1, 0]
    assert nearest_centroid_task(q, centroids, "l2").tolist() == [1, 1, 0]


def test_config_defaults_follow_the_official_code_and_bad_values_are_named():
    cfg = load_config(SMOKE, ["method={name: sprompt}"])
    m = cfg.method
    assert (m.prompt_length, m.centroids_per_task, m.distance, m.optimizer, m.schedule) == (10, 5, "l1", "sgd",
                                                                                            "cosine")
    with pytest.raises(ConfigError, match="method.distance: 'cosine' is not one of"):
        load_config(SMOKE, ["method={name: sprompt, distance: cosine}"])


def test_old_prompts_stay_frozen_and_centroids_are_k_means_fixed_points(sprompt_run):
    cfg, out, metrics = sprompt_run
    assert metrics["completed_tasks"] == 3 and len(metrics["tii_accuracy"]) == 3
    first, last = checkpoint_method_state(out, 0), checkpoint_method_state(out, 2)
    assert torch.equal(first["prompts"][0], last["prompts"][0]) and first["prompts"][0].abs().sum() > 0
    assert torch.equal(first["centroids"][0], last["centroids"][0]) and last["learned"] == 3
    assert not torch.equal(last["prompts"][1], last["prompts"][2])
    # every centroid is the mean of the normalised frozen queries nearest to it (Lloyd's fixed point)
    cfg, bench, method = build_run_parts(cfg)
    for task in range(3):
        frozen, _ = extract_features(method.model, loaders_of(cfg, bench, method, task).train_plain, "cpu")
        q = torch.nn.functional.normalize(frozen, dim=-1).double()
        c = last["centroids"][task].double()
        nearest = torch.cdist(q, c).argmin(1)
        for j in range(len(c)):
            assert torch.allclose(q[nearest == j].mean(0), c[j], atol=1e-5)


def test_a_prediction_depends_on_its_sample_only(sprompt_run):
    cfg, out, _ = sprompt_run
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))[:5]  # 2 classes x 6 test images
    assert_predictions_per_sample(cfg, out, 1, indices=order.tolist())


def test_the_prompt_is_tokens_after_the_class_token_of_block_zero(sprompt_run):
    """f(x; P) recomputed with timm's own modules: [cls + pos, P, patches + pos] through every block."""
    cfg, out, _ = sprompt_run
    _, bench, method = load_run_method(out)
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    x, vit, prompt = x[:4], method.model.vit, method.prompts[0]
    with torch.no_grad():
        tokens = vit._pos_embed(vit.patch_embed(x))
        tokens = torch.cat([tokens[:, :1], prompt.expand(len(x), -1, -1), tokens[:, 1:]], dim=1)
        expected = vit.norm(vit.blocks(vit.norm_pre(tokens)))[:, 0]
        assert torch.allclose(method.model(x, method.tokens(prompt)), expected, atol=1e-5)


def test_too_few_images_for_the_centroids_is_one_clear_error(tmp_path):
    cfg = load_config(SMOKE, ["method={name: sprompt, centroids_per_task: 500, epochs: 0}"])
    with pytest.raises(ConfigError, match="fewer than method.centroids_per_task=500"):
        run_training(cfg, tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bar:sprompt:1"])  # evaluation kills: tests/test_contract.py
def test_kill_and_resume_gives_the_uninterrupted_metrics(spec, sprompt_run, tmp_path):
    assert_kill_then_resume_matches(tiny_args, spec, tmp_path, reference=sprompt_run[1])  # the module's run


def test_classes_compete_only_within_the_selected_task(sprompt_run):
    """Official S-Prompts: the chosen task's classifier; ``seen_classes`` lets every seen class compete."""
    cfg, out, _ = sprompt_run
    _, bench, method = load_run_method(out)
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    within = method.predict(Batch(x, 0, torch.arange(len(x)), len(x), seen))
    predicted_task = method.class_to_task[within.logits.argmax(1)]
    assert torch.equal(predicted_task, within.task_ids)
    method.c.classify_within = "seen_classes"
    across = method.predict(Batch(x, 0, torch.arange(len(x)), len(x), seen))
    assert torch.isfinite(across.logits).all() and torch.equal(across.task_ids, within.task_ids)
    finite = torch.isfinite(within.logits)
    assert torch.equal(across.logits[finite], within.logits[finite]) and (~finite).any()
