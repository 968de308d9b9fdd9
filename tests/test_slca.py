"""SLCA (norga/methods/slca.py, slca_heads.py): the alignment's logit normalisation and mean shrink worked out by
hand, the heads' columns, one slow-learner step and one alignment epoch recomputed by hand (every tensor they
train), the heads restored after alignment, and the config's errors."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import build_run_parts, timm_features
from norga.config import ConfigError, load_config
from norga.methods.base import TaskLoaders
from norga.methods.slca_heads import TaskHeads, mean_scales, shifted_samples, task_normalised_logits
from norga.toolkit.gaussian import GaussianStore
from norga.toolkit.seeding import task_generator

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "slca.yaml"


def test_task_normalised_logits_by_hand():
    """Norms 5 and 10 -> n = 7.5 (+1e-7); T = 0.1 -> logits x 10 / 7.5."""
    parts = task_normalised_logits([torch.tensor([[3.0, 4.0]]), torch.tensor([[6.0, 8.0]])], 0.1)
    torch.testing.assert_close(parts[0], torch.tensor([[4.0, 16.0 / 3.0]]))
    torch.testing.assert_close(parts[1], torch.tensor([[8.0, 32.0 / 3.0]]))


def test_mean_scales_by_hand():
    """At task 2 with m = 0.1: 0.9 + 0.1 / 3, 0.9 + 0.2 / 3, 1."""
    scales = mean_scales(torch.tensor([0, 1, 2, 2]), 2, 0.1)
    torch.testing.assert_close(scales, torch.tensor([0.9 + 0.1 / 3, 0.9 + 0.2 / 3, 1.0, 1.0], dtype=torch.float64))
    assert torch.equal(mean_scales(torch.tensor([0, 1]), 1, 0.0), torch.ones(2, dtype=torch.float64))


def test_heads_fill_their_classes_columns():
    heads = TaskHeads(2, [[2, 0], [1, 3]])
    heads.add("cpu")
    with torch.no_grad():
        heads.heads[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        heads.heads[0].bias.copy_(torch.tensor([0.5, -1.0]))
    out = heads(torch.tensor([[3.0, 4.0]]))
    assert out[0, 2] == 3.5 and out[0, 0] == 7.0  # class 2 is the head's first row, class 0 its second
    assert torch.isinf(out[0, [1, 3]]).all()  # task 1 has no head yet


def test_shifted_samples_centre_on_the_scaled_means():
    store = GaussianStore("variance", ridge=1e-12)
    store.add(4, torch.tensor([[1.0, 2.0], [1.0, 2.0]]))
    store.add(7, torch.tensor([[-2.0, 0.0], [-2.0, 0.0]]))
    feats, labels = shifted_samples(store, [4, 7], torch.tensor([0.9, 1.0], dtype=torch.float64), 3,
                                    torch.Generator().manual_seed(0))
    assert labels.tolist() == [4, 4, 4, 7, 7, 7]
    expected = torch.tensor([[0.9, 1.8]] * 3 + [[-2.0, 0.0]] * 3)
    torch.testing.assert_close(feats, expected, atol=1e-4, rtol=0)


def _method(*overrides):
    return build_run_parts(load_config(SMOKE, list(overrides)))[2]


def _batch(method, task: int, n: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    classes = method.task_classes[task]
    y = torch.tensor([classes[i % len(classes)] for i in range(n)])
    return torch.randn(n, 3, 32, 32, generator=g), y


def test_one_slow_learner_step_by_hand():
    """Backbone p - lr s (g + wd p), new head the same at lr (first SGD step: the momentum buffer is the gradient),
    g of the cross-entropy of the task's own classes."""
    method = _method("method.epochs=1", "method.lr=0.5", "method.backbone_lr_scale=0.1", "method.weight_decay=0.01")
    x, y = _batch(method, 0)
    vit = copy.deepcopy(method.model.vit)
    torch.manual_seed(0)  # the new head's init draws from the global generator first
    method.learn_task(0, TaskLoaders(train=[(x, y)], train_plain=[(x, y)], test=None))
    torch.manual_seed(0)
    init_head = TaskHeads(64, method.task_classes).add("cpu")
    w0 = torch.nn.Parameter(init_head.weight.detach().clone())
    b0 = torch.nn.Parameter(init_head.bias.detach().clone())
    classes = method.task_classes[0]
    logits = timm_features(vit, x) @ w0.T + b0
    loss = F.cross_entropy(logits, torch.tensor([classes.index(int(c)) for c in y]))
    params = [p for p in vit.parameters()]
    grads = torch.autograd.grad(loss, params + [w0, b0])
    for (name, p1), p0, g in zip(method.model.vit.named_parameters(), params, grads[:-2]):
        torch.testing.assert_close(p1.detach(), p0.detach() - 0.05 * (g + 0.01 * p0.detach()), atol=1e-6, rtol=1e-4,
                                   msg=name)
    head = method.heads.heads[0]
    torch.testing.assert_close(head.weight.detach(), w0.detach() - 0.5 * (grads[-2] + 0.01 * w0.detach()))
    torch.testing.assert_close(head.bias.detach(), b0.detach() - 0.5 * (grads[-1] + 0.01 * b0.detach()))
    assert any(not torch.equal(p1, p0) for p1, p0 in zip(method.model.vit.parameters(), params))


def test_frozen_backbone_and_old_heads_stay_put():
    method = _method("method.backbone_lr_scale=0")
    assert not any(p.requires_grad for p in method.model.vit.parameters())
    head = method.heads.add("cpu")
    groups = method.parameter_groups(head)
    assert len(groups) == 1 and groups[0]["lr"] == method.c.lr
    tuned = _method("method.epochs=1", "method.ca_epochs=1")
    x0, y0 = _batch(tuned, 0)
    plain, plain_y = _batch(tuned, 0, seed=5)  # the statistics come from the un-augmented loader
    tuned.learn_task(0, TaskLoaders(train=[(x0, y0)], train_plain=[(plain, plain_y)], test=None))
    with torch.no_grad():
        feats = timm_features(tuned.model.vit.eval(), plain)
    for c in tuned.task_classes[0]:
        torch.testing.assert_close(tuned.store.stats[c]["mean"].float(), feats[plain_y == c].mean(0))
    head0 = copy.deepcopy(tuned.heads.heads[0].state_dict())
    x1, y1 = _batch(tuned, 1, seed=1)
    tuned.learn_task(1, TaskLoaders(train=[(x1, y1)], train_plain=[(x1, y1)], test=None))
    for key, value in tuned.heads.heads[0].state_dict().items():
        assert torch.equal(value, head0[key]), f"slow learner moved the old head's {key}"
    assert not torch.equal(tuned.aligned.heads[0].weight, tuned.heads.heads[0].weight)  # aligned copy trained
    assert tuned.store.classes == sorted(tuned.task_classes[0] + tuned.task_classes[1])


@pytest.mark.parametrize("logit_norm", [0.0, 0.1])
def test_one_alignment_epoch_by_hand(logit_norm):
    """The aligned heads after one epoch: SGD with momentum and weight decay over batches of the shifted samples,
    the cross-entropy over the seen classes of z (or z / (n T)); the slow learner's heads restored."""
    method = _method("method.ca_epochs=1", "method.ca_samples_per_class=3", "method.ca_lr=0.2",
                     f"method.ca_logit_norm={logit_norm}", "method.weight_decay=0.01", "method.ca_mean_shrink=0.5")
    g = torch.Generator().manual_seed(3)
    for t in (0, 1):
        method.heads.add("cpu")
        for c in method.task_classes[t]:
            method.store.add(c, torch.randn(5, 64, generator=g) + c)
    before = copy.deepcopy(method.heads)
    method.aligned = copy.deepcopy(method.heads)
    method.align(1)
    # by hand: the same draws (stage 1 generator: samples, then one permutation), scales 0.75 (task 0) and 1
    classes = method.seen_classes(1)
    gen = task_generator(method.cfg.seed, 1, 1)
    feats, labels = method.store.sample(classes, 3, gen)
    means = torch.stack([method.store.stats[c]["mean"] for c in classes]).float()
    scales = torch.tensor([0.75 if c in method.task_classes[0] else 1.0 for c in classes])
    feats = feats + ((scales - 1)[:, None] * means).repeat_interleave(3, 0)
    order = torch.randperm(len(labels), generator=gen)
    params = [p.detach().clone().requires_grad_(True) for p in before.parameters()]  # w0, b0, w1, b1
    buffers = [None] * 4
    for start in range(0, len(order), 3):
        idx = order[start:start + 3]
        z0 = feats[idx] @ params[0].T + params[1]
        z1 = feats[idx] @ params[2].T + params[3]
        if logit_norm:
            n = ((z0.norm(dim=1) + 1e-7 + z1.norm(dim=1) + 1e-7) / 2)[:, None]
            z0, z1 = z0 / n / logit_norm, z1 / n / logit_norm
        z = torch.full((3, 6), -1e9)
        z = z.index_put((torch.arange(3)[:, None], torch.tensor(method.task_classes[0])[None]), z0)
        z = z.index_put((torch.arange(3)[:, None], torch.tensor(method.task_classes[1])[None]), z1)
        seen = torch.tensor(sorted(classes))
        target = torch.tensor([sorted(classes).index(int(c)) for c in labels[idx]])
        loss = F.cross_entropy(z[:, seen], target)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for i, (p, gr) in enumerate(zip(params, grads)):
                d = gr + 0.01 * p
                buffers[i] = d.clone() if buffers[i] is None else 0.9 * buffers[i] + d
                p -= 0.2 * buffers[i]
    for p, q in zip(method.aligned.parameters(), params):
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-4)
    for p, q in zip(method.heads.parameters(), before.parameters()):
        assert torch.equal(p, q)  # align() trains the copy only


def test_keep_carries_the_aligned_heads():
    method = _method("method.epochs=1", "method.ca_epochs=1", "method.ca_heads=keep")
    for t in (0, 1):
        x, y = _batch(method, t, seed=t)
        method.learn_task(t, TaskLoaders(train=[(x, y)], train_plain=[(x, y)], test=None))
    for p, q in zip(method.heads.parameters(), method.aligned.parameters()):
        assert torch.equal(p, q)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.milestones"):
        load_config(SMOKE, ["method.milestones=[5, 2]"])
    with pytest.raises(ConfigError, match="method.ca_heads"):
        load_config(SMOKE, ["method.ca_heads=both"])
    assert math.isclose(load_config(SMOKE).method.backbone_lr_scale, 0.01)


def test_the_saved_state_holds_the_tuned_backbone():
    """A fresh method given the state after task 0 (prediction part only) predicts exactly as the trained one; the
    pretrained backbone alone does not."""
    from norga.methods.base import TestBatch

    method = _method("method.epochs=1", "method.lr=0.5", "method.backbone_lr_scale=0.1")
    x, y = _batch(method, 0)
    method.learn_task(0, TaskLoaders(train=[(x, y)], train_plain=[(x, y)], test=None))
    batch = TestBatch(x, 0, torch.arange(len(x)), len(x), method.seen_mask(0).cpu())
    trained = method.predict(batch).logits
    fresh = _method()
    fresh.heads.add("cpu")
    fresh.heads.load_state_dict(method.heads.state_dict())
    fresh.aligned = copy.deepcopy(fresh.heads)
    assert not torch.allclose(fresh.predict(batch).logits, trained)  # the heads alone do not reproduce it
    fresh = _method()
    fresh.load_state_dict(method.state_dict(0), with_training_state=False)
    torch.testing.assert_close(fresh.predict(batch).logits, trained, atol=0, rtol=0)
