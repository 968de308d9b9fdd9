"""HiDe-LoRA's task-identity learners (norga/methods/hidelora_tii.py), above all the reference's ``continual_lora``:
its features against timm with the LoRA merged into the weights by hand, the inputs and learning rates of its
training, the statistics and alignment it hands on, its task choice, and its checkpoints in a whole smoke run."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import (assert_predictions_per_sample, assert_reevaluation_identical, build_run_parts,
                      checkpoint_method_state, loaders_of, timm_features, tiny_vit, train_smoke_run)
from norga.config import load_config
from norga.methods import hidelora_tii
from norga.methods.hidelora_config import HiDeLoRAConfig
from norga.methods.hidelora_tii import TII_MODELS, shared_weight_copy
from norga.models.lora_qkv import SLOTS, LoRAQKV, attach_lora_qkv
from norga.toolkit.stages import extract_features

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "hidelora.yaml"
CONTINUAL = ["method.tii_model=continual_lora", "method.continual_lora.epochs=1",
             "method.continual_lora.align_epochs=1", "method.continual_lora.samples_per_class=8",
             "method.continual_lora.align_batch_size=8"]


def test_config_choices_are_the_registered_learners():
    field = HiDeLoRAConfig.__dataclass_fields__["tii_model"]
    assert set(field.metadata["choices"]) == set(TII_MODELS) == {"frozen_head", "continual_lora"}


def test_shared_weight_copy_shares_tensors_not_modules():
    vit = tiny_vit()
    view = shared_weight_copy(vit)
    assert all(a is b for a, b in zip(vit.parameters(), view.parameters()))
    attach_lora_qkv(view, [0], ["k"])
    assert isinstance(view.blocks[0].attn.qkv, LoRAQKV) and isinstance(vit.blocks[0].attn.qkv, torch.nn.Linear)
    assert view.blocks[0].attn.qkv.qkv.weight is vit.blocks[0].attn.qkv.weight


def merged_by_hand(tii, scale: float) -> torch.nn.Module:
    """A plain timm ViT whose qkv weights are W + scale * B_p A_p on each LoRA projection p: the shared LoRA merged
    into the weights, an independent route to the TII view's features."""
    vit = copy.deepcopy(tii.model.model.vit)
    for key, wrapper in tii.wrappers.items():
        qkv = copy.deepcopy(wrapper.qkv)
        branch, dim = wrapper.branches[0], wrapper.dim
        with torch.no_grad():
            for p, name in enumerate(wrapper.targets):
                rows = slice(SLOTS[name] * dim, (SLOTS[name] + 1) * dim)
                qkv.weight[rows] += scale * branch.up[p] @ branch.down[p]
        vit.blocks[int(key)].attn.qkv = qkv
    return vit


@pytest.fixture(scope="module")
def continual_task0():
    """The smoke method with the continual-LoRA TII after task 0 (the shared LoRA moved off B = 0 by hand)."""
    cfg, bench, method = build_run_parts(load_config(SMOKE, CONTINUAL + ["method.tap.epochs=1"]))
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    return cfg, bench, method


def test_features_equal_timm_with_the_lora_merged_by_hand(continual_task0):
    _, _, method = continual_task0
    tii = method.tii
    g = torch.Generator().manual_seed(5)
    trained = [w.branches[0].up.detach().clone() for w in tii.wrappers.values()]
    with torch.no_grad():
        for w in tii.wrappers.values():
            w.branches[0].up.add_(0.3 * torch.randn(w.branches[0].up.shape, generator=g))
    x = torch.randn(3, 3, 32, 32, generator=g)
    scale = method.c.alpha / method.c.continual_lora.rank
    try:
        with torch.no_grad():
            ours = tii.features(x)
            torch.testing.assert_close(ours, timm_features(merged_by_hand(tii, scale), x), atol=1e-5, rtol=1e-5)
            assert not torch.allclose(ours, method.model(x), atol=1e-3)  # the frozen view of the task LoRAs differs
            for w in method.wrappers.values():
                assert w.active == ()  # the task LoRAs are untouched by the TII view
    finally:
        with torch.no_grad():
            for w, up in zip(tii.wrappers.values(), trained):
                w.branches[0].up.copy_(up)


@pytest.mark.parametrize("task, slow_first, slow", [(0, False, 1.0), (0, True, 0.1), (1, False, 0.1)])
def test_training_groups_and_loss_inputs(continual_task0, monkeypatch, task, slow_first, slow):
    """Adam groups (shared LoRA at slow_lr x lr from task 1 on, and on task 0 only with slow_first_task; the head at
    lr), clipping of both at grad_clip, CE over the task's classes of the head on the features under the LoRA."""
    cfg, bench, method = continual_task0
    captured = {}
    monkeypatch.setattr(hidelora_tii, "run_stage", lambda stage, batches, forward, terms: captured.update(
        stage=stage, batches=batches, forward=forward, terms=terms))
    monkeypatch.setattr(method.c.continual_lora, "slow_first_task", slow_first)
    method.tii._train(task, loaders_of(cfg, bench, method, task))
    s, lr = method.c.continual_lora, method.c.continual_lora.lr  # smoke: scale_lr_by_batch false
    groups = captured["stage"].optimizer.param_groups
    assert [g["lr"] for g in groups] == pytest.approx([lr * slow, lr])
    assert [len(g["params"]) for g in groups] == [2 * len(method.tii.wrappers), 2]
    assert captured["stage"].clip == s.grad_clip and captured["stage"].epochs == s.epochs
    x, y = next(iter(captured["batches"](0)))
    out = captured["forward"]((x, y))
    with torch.no_grad():
        logits = method.tii_head(method.tii.features(x))
    torch.testing.assert_close(out["logits"].detach(), logits)
    masked = torch.full_like(logits, float("-inf"))
    classes = method.task_classes[task]
    masked[:, classes] = logits[:, classes]
    assert float(captured["terms"]["ce"](out).detach()) == pytest.approx(float(F.cross_entropy(masked, y)), rel=1e-5)


def test_statistics_are_of_the_lora_features_and_alignment_inputs(continual_task0, monkeypatch):
    """After task 0: each class's mean is the mean of its un-augmented training features under the shared LoRA.
    Task 1's alignment: every seen class, the section's unscaled lr, samples and batch, C_old batches."""
    cfg, bench, method = continual_task0
    loaders = loaders_of(cfg, bench, method, 0)
    feats, labels = extract_features(method.tii.model, loaders.train_plain, "cpu", 0)
    for c in method.task_classes[0]:
        torch.testing.assert_close(method.uninstructed.stats[c]["mean"].float(), feats[labels == c].mean(0),
                                   atol=1e-5, rtol=1e-5)
    captured = {}
    monkeypatch.setattr(hidelora_tii, "align_head", lambda *a, **k: captured.update(args=a, kwargs=k))
    before = {c: method.uninstructed.stats[c]["mean"].clone() for c in method.task_classes[0]}
    monkeypatch.setattr(method.tii, "_train", lambda task, loaders: None)
    method.tii.learn(1, loaders_of(cfg, bench, method, 1))
    s = method.c.continual_lora
    head, store, classes, _, epochs, lr, per_class, batch = captured["args"][:8]
    assert head is method.tii_head and store is method.uninstructed
    assert classes == method.seen_classes(1) and (epochs, lr, per_class, batch) == (
        s.align_epochs, s.align_lr, s.samples_per_class, s.align_batch_size)
    assert captured["args"][10:12] == ("tii_align", len(method.task_classes[0]))  # C_old batches per epoch
    assert "weight_decay" not in captured["kwargs"]  # the reference's group weight decay 0 wins over SGD's 5e-4
    for c, mean in before.items():
        assert torch.equal(method.uninstructed.stats[c]["mean"], mean)  # old classes keep their statistics


def test_task_is_the_linear_heads_argmax_over_seen_classes(continual_task0):
    from norga.methods.base import TestBatch
    from norga.toolkit.feature_cache import FeatureCache

    _, _, method = continual_task0
    target = method.task_classes[1][0]
    x = torch.randn(4, 3, 32, 32)
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    with torch.no_grad():
        saved = method.tii_head.bias.clone()
        method.tii_head.bias[target] = 1e6
    try:
        assert method.tii.tasks(TestBatch(x, 0, torch.arange(4), 4, seen), FeatureCache()).tolist() == [1] * 4
        seen[method.task_classes[1]] = False
        tasks = method.tii.tasks(TestBatch(x, 0, torch.arange(4), 4, seen), FeatureCache())
        assert 1 not in tasks.tolist()
    finally:
        with torch.no_grad():
            method.tii_head.bias.copy_(saved)


@pytest.fixture(scope="module")
def continual_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cfg")
    extra = {"tii_model": "continual_lora", "continual_lora": {"epochs": 2, "align_epochs": 2, "samples_per_class": 16,
                                                              "align_batch_size": 16}}
    (folder / "continual.yaml").write_text(f"base: {SMOKE}\nmethod: {extra}\n")
    return train_smoke_run(tmp_path_factory, folder / "continual.yaml", "continual")


def test_smoke_run_checkpoints_reload_and_reevaluate(continual_run, tmp_path_factory):
    """The shared LoRA of every task is in its checkpoint (it changes from task to task), predictions per sample
    equal the batch's, the re-evaluation from checkpoints equals the run, and a frozen_head checkpoint is refused."""
    cfg, out, metrics = continual_run
    assert metrics["completed_tasks"] == 3
    states = [checkpoint_method_state(out, t)["tii_lora"] for t in range(3)]
    first = next(iter(states[0]))
    assert not torch.equal(states[0][first][0]["up"], states[2][first][0]["up"])
    assert_predictions_per_sample(cfg, out, 2)
    assert_reevaluation_identical(out, metrics)
    _, _, method = build_run_parts(cfg)
    state = checkpoint_method_state(out, 0)
    del state["tii_lora"]
    with pytest.raises(KeyError, match="tii_model=frozen_head"):
        method.load_state_dict(state)
