"""HiDe-LoRA (norga/methods/hidelora.py): the task LoRA's update written out by hand, the branch selection, the
factor momentum, the reference's A init, the warm-up schedule, the regulariser's prototypes and every WTP loss
term's inputs, and prediction through the inferred task's LoRA."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from conftest import build_run_parts, loaders_of
from norga.config import ConfigError, load_config
from norga.methods import hidelora as hidelora_module
from norga.methods.hidelora import HiDeLoRA, mix_with_previous, reference_down_init
from norga.models.lora_qkv import LoRAQKV
from norga.toolkit.gaussian import GaussianStore
from norga.toolkit.schedules import lr_factor

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "hidelora.yaml"


def tiny_qkv() -> torch.nn.Linear:
    """A fused qkv D=2 -> 6 with W = 0 and bias (1..6), so the output is the bias plus the LoRA update."""
    qkv = torch.nn.Linear(2, 6)
    with torch.no_grad():
        qkv.weight.zero_()
        qkv.bias.copy_(torch.arange(1.0, 7.0))
    return qkv


def test_task_lora_on_k_and_v_by_hand():
    """rank 2, alpha 1 -> scale 1/2; x = (1, 2); k: A = [[1, 0], [0, 1]], B = [[1, 0], [0, 1]] -> x A^T B^T = (1, 2);
    v: A = [[1, 1], [0, 0]], B = [[2, 0], [0, 0]] -> x A^T = (3, 0) -> (6, 0). q untouched. Output = bias +
    scale * update: q (1, 2), k (3 + 0.5, 4 + 1), v (5 + 3, 6 + 0)."""
    wrapper = LoRAQKV(tiny_qkv(), ("k", "v"))
    branch = wrapper.add_branch(2)
    with torch.no_grad():
        branch.down.copy_(torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 0.0]]]))
        branch.up.copy_(torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]]]))
    owner = SimpleNamespace(c=SimpleNamespace(alpha=1.0, rank=2))
    wrapper.coefficients = lambda w: HiDeLoRA.scaling(owner, w)
    out = wrapper(torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0, 3.5, 5.0, 8.0, 6.0]]))


def test_only_the_active_branch_applies():
    """Two branches on v adding (10, 0) and (0, 100) to x = (1, 0): active (0,) -> +10 on v's first unit, (1,) ->
    +100 on its second, () -> the frozen qkv, None -> both."""
    wrapper = LoRAQKV(tiny_qkv(), ("v",))
    for value in ((10.0, 0.0), (0.0, 100.0)):
        b = wrapper.add_branch(1)
        with torch.no_grad():
            b.down.copy_(torch.tensor([[[1.0, 0.0]]]))
            b.up.copy_(torch.tensor(value).reshape(1, 2, 1))
    x = torch.tensor([[1.0, 0.0]])
    expected = {(0,): [15.0, 6.0], (1,): [5.0, 106.0], (): [5.0, 6.0], None: [15.0, 106.0]}
    for active, v in expected.items():
        wrapper.active = active
        torch.testing.assert_close(wrapper(x)[0, 4:], torch.tensor(v))


def test_momentum_mixes_each_factor_with_the_mean_of_the_older_tasks():
    """m = 0.1, factors 1, 3, 5: 0.9 * 5 + 0.1 * (1 + 3) / 2 = 4.7."""
    factors = [torch.full((2, 2), v) for v in (1.0, 3.0, 5.0)]
    torch.testing.assert_close(mix_with_previous(factors, 0.1), torch.full((2, 2), 4.7))


def test_reference_init_is_uniform_within_one_over_sqrt_rank():
    """kaiming_uniform(a=sqrt(5)) of a (D, r) tensor: bound sqrt(6 / (1 + 5)) * sqrt(3 / r) / sqrt(2)... = 1/sqrt(r);
    r = 4 -> 0.5 (D = 4000 draws per row reach it)."""
    torch.manual_seed(0)
    down = torch.zeros(2, 4, 4000)
    reference_down_init(down)
    assert float(down.abs().max()) <= 0.5
    assert float(down.abs().max()) > 0.499
    ref = torch.empty(4000, 4)
    torch.nn.init.kaiming_uniform_(ref, a=math.sqrt(5))  # the reference's own call on its (D, r) layout
    assert float(ref.abs().max()) <= 0.5 < float(ref.abs().max()) + 0.01


def test_timm_warmup_then_cosine_by_hand():
    """Base lr 0.01, warm-up lr 0.001 (w = 0.1) over 5 epochs, cosine over 50, no floor, timm stepping: epochs 0 and
    1 at w, epoch 2 at w + (1 - w) / 5 = 0.28, epoch 6 at (1 + cos(pi * 5 / 50)) / 2 = 0.975528."""
    f = lambda e: lr_factor(e, "cosine", 50, min_ratio=0.0, stepping="timm", warmup_epochs=5,  # noqa: E731
                            warmup_ratio=0.1)
    assert [f(0), f(1)] == pytest.approx([0.1, 0.1])
    assert f(2) == pytest.approx(0.28)
    assert f(6) == pytest.approx(0.9755283, rel=1e-6)
    assert lr_factor(6, "cosine", 50, stepping="timm") == pytest.approx(0.9755283, rel=1e-6)  # no warm-up: same


def test_prototypes_are_every_centroid_of_the_old_classes():
    """multi_centroid with 2 centroids per class: classes 0 and 1 old -> 4 rows; ``means`` -> 2 rows."""
    store = GaussianStore("multi_centroid", n_centroids=2, seed=0)
    g = torch.Generator().manual_seed(0)
    for c in (0, 1, 2):
        store.add(c, torch.cat([torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g) + 10.0 * (c + 1)]))
    host = SimpleNamespace(instructed=store, device=torch.device("cpu"), old_classes=lambda t: [0, 1],
                           c=SimpleNamespace(wtp=SimpleNamespace(prototypes="centroids")))
    rows = HiDeLoRA.prototypes(host, 2)
    expected = torch.cat([store.stats[0]["centroids"], store.stats[1]["centroids"]]).float()
    torch.testing.assert_close(rows, expected)
    host.c.wtp.prototypes = "means"
    torch.testing.assert_close(HiDeLoRA.prototypes(host, 2), store.means([0, 1]))


def test_config_rejects_unknown_projections():
    with pytest.raises(ConfigError, match="lora_targets"):
        load_config(SMOKE, ["method.lora_targets=[k, w]"])


# ---- the method on the smoke backbone -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def task0_method():
    """The smoke method after task 0, with the WTP of task 1 captured (nothing of task 1 trained)."""
    cfg, bench, method = build_run_parts(load_config(SMOKE, ["method.tii.epochs=1", "method.tap.epochs=1"]))
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    return cfg, bench, method


def test_wtp_terms_inputs_and_lora_init_and_momentum(task0_method, monkeypatch):
    """Task 1's WTP: A_1, B_1 start as task 0's; features are the model under LoRA_1 only; CE over task 1's classes;
    reg = lambda * CE(M M^T / 0.8, identity), M = [task 0's centroids; features]; LoRA and head at lr
    (smoke: unscaled); after WTP, A_1 <- 0.9 A_1 + 0.1 A_0 (and B)."""
    cfg, bench, method = task0_method
    captured = {}

    def fake_run_stage(stage, batches, forward, terms):
        captured.update(stage=stage, forward=forward, terms=terms, batches=batches)
        with torch.no_grad():  # stand-in for training: move task 1's factors
            for w in method.wrappers.values():
                w.branches[1].down.add_(0.5)
                w.branches[1].up.add_(0.25)
        return []

    monkeypatch.setattr(hidelora_module, "run_stage", fake_run_stage)
    task0 = {k: (w.branches[0].down.detach().clone(), w.branches[0].up.detach().clone())
             for k, w in method.wrappers.items()}
    method.train_wtp(1, loaders_of(cfg, bench, method, 1))
    for k, w in method.wrappers.items():
        a0, b0 = task0[k]
        torch.testing.assert_close(w.branches[1].down, 0.9 * (a0 + 0.5) + 0.1 * a0)
        torch.testing.assert_close(w.branches[1].up, 0.9 * (b0 + 0.25) + 0.1 * b0)
    with torch.no_grad():  # undo the momentum on the factors to check the captured forward against LoRA_1 as trained
        for k, w in method.wrappers.items():
            w.branches[1].down.copy_(task0[k][0] + 0.5)
            w.branches[1].up.copy_(task0[k][1] + 0.25)
    x, y = next(iter(captured["batches"](0)))
    out = captured["forward"]((x, y))
    with torch.no_grad():
        for w in method.wrappers.values():
            w.active = (1,)
        expected = method.model(x)
        for w in method.wrappers.values():
            w.active = ()
        frozen = method.model(x)
    torch.testing.assert_close(out["features"], expected)
    assert not torch.allclose(out["features"], frozen)
    classes = method.task_classes[1]
    masked = torch.full_like(out["logits"].detach(), float("-inf"))
    masked[:, classes] = out["logits"].detach()[:, classes]
    assert float(captured["terms"]["ce"](out).detach()) == pytest.approx(float(F.cross_entropy(masked, y)), rel=1e-5)
    rows = torch.cat([method.instructed.stats[c]["centroids"] for c in method.task_classes[0]]).float()
    m = torch.cat([rows, out["features"]])
    reg = cfg.method.wtp.reg * F.cross_entropy(m @ m.T / 0.8, torch.arange(len(m)))
    assert float(captured["terms"]["reg"](out).detach()) == pytest.approx(float(reg), rel=1e-5)
    groups = captured["stage"].optimizer.param_groups
    assert [g["initial_lr"] for g in groups] == pytest.approx([cfg.method.wtp.lr, cfg.method.wtp.lr])
    assert [g["lr"] for g in groups] == pytest.approx([1e-6, 1e-6])  # epoch 0 of the warm-up: warmup_lr (timm)
    assert [len(g["params"]) for g in groups] == [2 * len(method.wrappers), 2]  # A_1, B_1 per block; psi


def test_prediction_uses_the_inferred_tasks_lora(task0_method):
    """With the TII head forced to a class of task 1, the class-incremental logits are psi of the features under
    LoRA_1 and the task-incremental ones (test task 0) psi of the features under LoRA_0; the task ids are 1."""
    from norga.methods.base import TestBatch
    from norga.toolkit.feature_cache import FeatureCache

    _, _, method = task0_method
    first = next(iter(method.wrappers.values()))
    if len(first.branches) < 2:
        method.start_task(1)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for w in method.wrappers.values():
            w.branches[1].up.copy_(torch.randn(w.branches[1].up.shape, generator=g))
        method.tii_head.fc.bias[method.task_classes[1][0]] = 1e6
    x = torch.randn(4, 3, 32, 32, generator=g)
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    pred = method.predict(TestBatch(x, 0, torch.arange(4), 4, seen), FeatureCache())
    with torch.no_grad():
        under = [method.tuned(x, k) for k in (0, 1)]
        torch.testing.assert_close(pred.logits, method.head(under[1]))
        torch.testing.assert_close(pred.true_task_logits, method.head(under[0]))
    assert pred.task_ids.tolist() == [1, 1, 1, 1]
    assert not torch.allclose(under[0], under[1])
