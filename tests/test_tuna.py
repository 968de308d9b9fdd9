"""TUNA (norga/methods/tuna.py, tuna_parts.py): its formulas against numbers worked out by hand, the inputs of every
loss term pinned on one batch, and a smoke run through ``norga train`` whose adapters, universal slot and final
accuracies are recomputed by hand."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import adapted_by_hand, build_run_parts, loaders_of, train_smoke_run
from norga.config import ConfigError, load_config
from norga.methods import tuna as tuna_module
from norga.methods.tuna_parts import (combine, cosface_loss, elect_merge, entropy, mean_factors,
                                      orthogonality_penalty, orthogonality_weight, select_by_entropy)

TUNA_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "tuna.yaml"


def test_cosface_by_hand():
    """cos (0.5, 0.2), label 0, s = 2, m = 0.1: numerator 2 (0.5 - 0.1) = 0.8, the other 2 x 0.2 = 0.4;
    loss = -(0.8 - log(e^0.8 + e^0.4)) = log(1 + e^-0.4). Label 1 with the same cosines: log(1 + e^(1.0 - 0.2))."""
    cos = torch.tensor([[0.5, 0.2], [0.5, 0.2]])
    assert cosface_loss(cos[:1], torch.tensor([0]), 2.0, 0.1).item() == pytest.approx(math.log(1 + math.exp(-0.4)))
    both = (math.log(1 + math.exp(-0.4)) + math.log(1 + math.exp(0.8))) / 2
    assert cosface_loss(cos, torch.tensor([0, 1]), 2.0, 0.1).item() == pytest.approx(both)


def test_orthogonality_penalty_by_hand():
    """Layer 1: rows of U = (3, 4), (0, 1) -> (0.6, 0.8), (0, 1); of V = (1, 0), (1, 1) -> (1, 0), (1, 1)/sqrt 2;
    the 2x2 products 0.6, 1.4/sqrt 2, 0, 1/sqrt 2, mean (0.6 + 2.4/sqrt 2) / 4. Layer 2: U rows (1, 0), (0, -1),
    V rows (0, 1), (1, 1)/sqrt 2: products 0, 1/sqrt 2, -1, -1/sqrt 2, mean -0.25, |.| 0.25. Mean over layers."""
    r2 = math.sqrt(2)
    current = [torch.tensor([[3.0, 4.0], [0.0, 1.0]]), torch.tensor([[2.0, 0.0], [0.0, -5.0]])]
    old = [torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 2.0], [1.0, 1.0]])]
    one = ((0.6 + 2.4 / r2) / 4 + 0.25) / 2
    assert orthogonality_penalty(current, [old]).item() == pytest.approx(one, rel=1e-6)
    assert orthogonality_penalty(current, [old, old]).item() == pytest.approx(2 * one, rel=1e-6)
    assert orthogonality_weight(0.001, 1) == pytest.approx(0.001 * math.exp(-2))


def test_elect_merge_by_hand():
    """Task values (1, -2, 0.5, 0) and (-3, 1, 0.2, 0): means (-1, -0.5, 0.35, 0) give signs (-, -, +, -); the
    largest magnitude agreeing with each sign: 3, 2, 0.5, none -> (-3, -2, 0.5, 0)."""
    merged = elect_merge([torch.tensor([1.0, -2.0, 0.5, 0.0]), torch.tensor([-3.0, 1.0, 0.2, 0.0])])
    assert torch.equal(merged.abs(), torch.tensor([3.0, 2.0, 0.5, 0.0])) and merged[:2].lt(0).all()


def test_entropy_selection_and_combination_by_hand():
    """Adapter 0: logits (0, 0) -> entropy log 2; adapter 1: (log 3, 0) -> p (3/4, 1/4), entropy
    -(3/4 log 3/4 + 1/4 log 1/4) < log 2. Sample 2 swaps them. combine: p_specific + p_universal."""
    t = torch.tensor([[[0.0, 0.0], [math.log(3), 0.0]], [[math.log(3), 0.0], [0.0, 0.0]]])  # (T=2, B=2, K=2)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert torch.allclose(entropy(t[:, 0]), torch.tensor([math.log(2), h]), atol=1e-6)
    assert select_by_entropy(t).tolist() == [1, 0]
    scores = combine(torch.tensor([[math.log(3), 0.0]]), torch.tensor([[0.0, 0.0]]))
    assert torch.allclose(scores, torch.tensor([[1.25, 0.75]]))


def test_mean_factors_by_hand():
    """3 tasks of 2 classes, after task 2. by_task: 0.9 + 0.1 (t_c + 1) / 3. reference: t_id = k // -2 = 0, -1, -1,
    -2, -2, -3 for k = 0..5, so 0.9 + 0.1 (t_id + 1) / 3."""
    task_of, sizes = [0, 0, 1, 1, 2, 2], [2, 2, 2]
    assert mean_factors(task_of, sizes, 2, "none") == [1.0] * 6
    assert mean_factors(task_of, sizes, 2, "by_task") == pytest.approx([0.9 + 0.1 / 3] * 2 + [0.9 + 0.2 / 3] * 2
                                                                        + [1.0] * 2)
    third = 0.1 / 3
    assert mean_factors(task_of, sizes, 2, "reference") == pytest.approx(
        [0.9 + third, 0.9, 0.9, 0.9 - third, 0.9 - third, 0.9 - 2 * third])


def _capture_stages(monkeypatch):
    """Replace the method's run_stage by a recorder: stage name -> (stage, batches, forward, terms)."""
    seen = {}
    monkeypatch.setattr(tuna_module, "run_stage", lambda stage, batches, forward, terms: seen.__setitem__(
        stage.name, (stage, batches, forward, terms)))
    return seen


def _adapter(tuned_state, block, k):
    prefix = f"{block}.{k}."
    return {key[len(prefix):]: v for key, v in tuned_state.items() if key.startswith(prefix)}


@pytest.mark.parametrize("init", ["previous", "fresh"])
def test_loss_terms_inputs_and_adapter_init(monkeypatch, init):
    """Task 1 of the smoke config (dropout off): its adapter starts as a copy of task 0's (previous) or at zero
    output (fresh); cosface gets s cos of phi_2 against the task's head rows with local labels; orth gets
    reg e^-2 x the penalty of adapter 2's up weights against adapter 1's; the alignment samples every seen class."""
    cfg = load_config(TUNA_SMOKE, ["method.adapter_dropout=0", f"method.adapter_init={init}", "method.margin=0.2"])
    cfg, bench, method = build_run_parts(cfg)
    seen = _capture_stages(monkeypatch)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    with torch.no_grad():
        for b in method.blocks:
            b.tuned[1].up.weight.normal_()
    method.learn_task(1, loaders_of(cfg, bench, method, 1))
    state = method.tuned.state_dict()
    for b in range(2):
        first, second = _adapter(state, b, 1), _adapter(state, b, 2)
        if init == "previous":
            assert all(torch.equal(first[k], second[k]) for k in first)
        else:
            assert second["up.weight"].abs().sum() == 0 and not torch.equal(first["down.weight"], second["down.weight"])
    stage, batches, forward, terms = seen["tuna"]
    trained = {id(p) for group in stage.optimizer.param_groups for p in group["params"]}
    old_ups = {id(b.tuned[1].up.weight) for b in method.blocks}
    assert old_ups <= trained and not {id(b.tuned[1].down.weight) for b in method.blocks} & trained
    x, y = next(iter(loaders_of(cfg, bench, method, 1).train))
    out = forward((x, y))
    vit = method.model.vit.eval()
    feats = adapted_by_hand(vit, x, [_adapter(state, b, 2) for b in range(2)])
    cos = F.normalize(feats, dim=-1) @ F.normalize(method.heads[1], dim=-1).T
    local = torch.tensor([bench.task_classes[1].index(int(c)) for c in y])
    assert torch.allclose(out["cos"], cos, atol=1e-5) and torch.equal(out["labels"], local)
    assert terms["cosface"](out).item() == pytest.approx(cosface_loss(cos, local, 20.0, 0.2).item(), rel=1e-5)
    ups = [[_adapter(state, b, k)["up.weight"] for b in range(2)] for k in (1, 2)]
    assert terms["orth"](out).item() == pytest.approx(
        0.001 * math.exp(-2) * orthogonality_penalty(ups[1], [ups[0]]).item(), rel=1e-5)
    stage, batches, forward, terms = seen["tuna_ca"]
    ca = list(batches(0))
    labels = torch.cat([b[1] for b in ca])
    assert len(ca) == 4 and all(len(b[1]) == 8 for b in ca) and torch.bincount(labels).tolist() == [8] * 4


@pytest.fixture(scope="module")
def tuna_run(tmp_path_factory):
    return train_smoke_run(tmp_path_factory, TUNA_SMOKE, "tuna")


def test_smoke_run_adapters_universal_slot_and_accuracy_by_hand(tuna_run):
    """Old task adapters change only in their up-projection (orth_updates_old); slot 0 is the elect-merge of the task
    adapters; class means come from the un-augmented images under their task's adapter; the final accuracies are the
    entropy-selected adapter's softmax plus the last adapter's (``universal: last_task``), written out."""
    cfg, out, metrics = tuna_run
    states = [torch.load(p, weights_only=True)["method"] for p in sorted((out / "checkpoints").glob("task_*.pt"))]
    assert [s["learned_tasks"] for s in states] == [1, 2, 3]
    for t, s in enumerate(states):
        for later in states[t + 1:]:  # only the up-projection moves later, by the orthogonality term (the code)
            old, now = _adapter(s["tuned"], 0, t + 1), _adapter(later["tuned"], 0, t + 1)
            assert all(torch.equal(old[k], now[k]) == (k != "up.weight") for k in old)
    final = states[-1]
    for b in range(2):
        merged = _adapter(final["tuned"], b, 0)
        for key, value in merged.items():
            assert torch.equal(value, elect_merge([_adapter(final["tuned"], b, k)[key] for k in (1, 2, 3)]))
    _, bench, method = build_run_parts(cfg)
    vit = method.model.vit.eval()
    heads = F.normalize(torch.cat(final["heads"]), dim=-1)
    order = [c for t in bench.task_classes for c in t]
    for t in range(3):
        xs, ys = zip(*loaders_of(cfg, bench, method, t).train_plain)
        x, y = torch.cat(xs), torch.cat(ys)
        with torch.no_grad():
            feats = adapted_by_hand(vit, x, [_adapter(final["tuned"], b, t + 1) for b in range(2)])
        for c in bench.task_classes[t]:  # class statistics from the un-augmented images under the task's adapter
            assert torch.allclose(final["stats"]["stats"][c]["mean"].float(), feats[y == c].mean(0), atol=1e-5)
        xs, ys = zip(*loaders_of(cfg, bench, method, t).test)
        x, y = torch.cat(xs), torch.cat(ys)
        with torch.no_grad():
            logits = torch.stack([20.0 * F.normalize(adapted_by_hand(vit, x, [_adapter(final["tuned"], b, k)
                                                                               for b in range(2)]), dim=-1) @ heads.T
                                  for k in (1, 2, 3)])  # (3, B, 6) in head order
        p = logits.softmax(-1)
        chosen = (-(p * torch.log(p + 1e-10)).sum(-1)).argmin(0)
        scores = p[chosen, torch.arange(len(y))] + p[2]
        predicted = torch.tensor(order)[scores.argmax(1)]
        assert metrics["acc_matrix"][t][2] == pytest.approx((predicted == y).double().mean().item(), abs=1e-9)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.adapter_layers"):
        load_config(TUNA_SMOKE, ["method.adapter_layers=[]"])
    with pytest.raises(ConfigError, match="method.ca_mean_decay"):
        load_config(TUNA_SMOKE, ["method.ca_mean_decay=sometimes"])
    with pytest.raises(ConfigError, match="method.universal"):
        load_config(TUNA_SMOKE, ["method.universal=both"])


@pytest.mark.parametrize("universal", ["last_task", "merged"])
def test_prediction_uses_the_configured_universal_branch(monkeypatch, universal):
    """Two tasks learned (training skipped, adapters randomised): the scores are softmax(s cos) of the
    entropy-selected task adapter plus that of adapter 2 (last_task) or of slot 0 (merged), written out; with the
    true task given, its adapter replaces the selected one."""
    from norga.methods.base import TestBatch

    cfg = load_config(TUNA_SMOKE, [f"method.universal={universal}"])
    cfg, bench, method = build_run_parts(cfg)
    _capture_stages(monkeypatch)
    for t in range(2):
        method.learn_task(t, loaders_of(cfg, bench, method, t))
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in method.tuned.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    seen = torch.zeros(6, dtype=torch.bool)
    seen[bench.task_classes[0] + bench.task_classes[1]] = True
    out = method.predict(TestBatch(x, 0, torch.arange(len(x)), len(x), seen))
    vit, state = method.model.vit.eval(), method.tuned.state_dict()
    order = bench.task_classes[0] + bench.task_classes[1]
    heads = F.normalize(torch.cat(list(method.heads)).detach(), dim=-1)

    def probs(k):
        feats = adapted_by_hand(vit, x, [_adapter(state, b, k) for b in range(2)])
        return (20.0 * F.normalize(feats, dim=-1) @ heads.T).softmax(-1)

    with torch.no_grad():
        p = torch.stack([probs(1), probs(2)])
        uni = probs(2 if universal == "last_task" else 0)
    chosen = (-(p * torch.log(p + 1e-10)).sum(-1)).argmin(0)
    assert torch.equal(out.task_ids, chosen)
    assert torch.allclose(out.logits[:, order], p[chosen, torch.arange(len(x))] + uni, atol=1e-5)
    assert torch.allclose(out.true_task_logits[:, order], p[0] + uni, atol=1e-5)
