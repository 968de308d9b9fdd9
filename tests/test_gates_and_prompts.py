"""Gate registry and formulas; prompt pool layout, ensemble and freezing."""
from __future__ import annotations

import math

import pytest
import torch

from norga.models import GATES, PromptPool, build_gate
from norga.gates.schema import GATE_OPTIONS
from norga.gates.modules import Gate, register_gate


def test_registry_holds_linear_and_norga():
    assert {"linear", "norga"} <= set(GATES)
    with pytest.raises(ValueError, match="method.gate.name: unknown gate 'nope'; choose one of"):
        build_gate("nope")
    with pytest.raises(ValueError, match=r"method.gate.activation: 'relu' is not one of \['tanh', 'sigmoid', 'gelu'\]"):
        build_gate("norga", activation="relu")
    with pytest.raises(ValueError,
                       match=r"unknown key\(s\) \['method.gate.activation'\].*gate 'linear' takes no options"):
        build_gate("linear", activation="tanh")
    with pytest.raises(ValueError, match="method.gate.alpha_init: expected a number"):
        build_gate("norga", alpha_init="big")


def test_gates_own_their_policy_and_report():
    from norga.gates.schema import resolve_gate_spec

    norga, linear = build_gate("norga", activation="gelu", alpha_init=0.5), build_gate("linear")
    assert [norga.trains_on(t) for t in range(3)] == [True, False, False]  # alpha, tau: the first task only
    assert not linear.trains_on(0) and linear.report() == {} and list(linear.parameters()) == []
    assert norga.report() == {"alpha": 0.5, "tau": 1.0}
    assert resolve_gate_spec({"name": "norga"}) == {"name": "norga", "activation": "tanh", "alpha_init": 1.0,
                                                    "tau_init": 1.0}


@pytest.mark.parametrize("activation,fn", [
    ("tanh", math.tanh), ("sigmoid", lambda z: 1 / (1 + math.exp(-z))),
    ("gelu", lambda z: 0.5 * z * (1 + math.erf(z / math.sqrt(2)))),
])
def test_norga_gate_formula(activation, fn):
    gate = build_gate("norga", activation=activation)
    assert gate.alpha.item() == 1.0 and gate.tau.item() == 1.0  # initialised to 1 as in the paper's code
    gate.alpha.data.fill_(0.3)
    gate.tau.data.fill_(-2.0)
    s = torch.tensor([-3.0, -0.5, 0.0, 1.25, 4.0])
    expected = torch.tensor([v + 0.3 * fn(-2.0 * v) for v in s.tolist()])
    assert torch.allclose(gate(s), expected, atol=1e-6)
    assert torch.allclose(gate.extra(s), expected - s, atol=1e-6)


def test_linear_gate_is_identity_and_freezing_works():
    s = torch.randn(3, 4)
    assert torch.equal(build_gate("linear")(s), s)
    gate = build_gate("norga")
    gate.freeze()
    assert not any(p.requires_grad for p in gate.parameters())
    gate.unfreeze()
    assert all(p.requires_grad for p in gate.parameters())


def test_new_gate_is_one_small_class():
    @register_gate("test_square_residual")
    class SquareResidual(Gate):
        def extra(self, scores):
            return scores ** 2

    try:
        assert torch.equal(build_gate("test_square_residual")(torch.tensor([2.0])), torch.tensor([6.0]))
        with pytest.raises(ValueError, match="already registered"):
            register_gate("test_square_residual")(SquareResidual)
    finally:
        GATES.pop("test_square_residual")
        GATE_OPTIONS.pop("test_square_residual")


def test_prompt_pool_layout_gather_and_init():
    torch.manual_seed(0)
    pool = PromptPool(num_tasks=3, num_layers=5, length=4, num_heads=2, head_dim=8)
    assert pool.prompt(0).shape == (5, 2, 4, 2, 8)
    values = torch.cat([p.detach().flatten() for p in pool.prompts])
    assert values.min() >= -1 and values.max() <= 1 and values.std() > 0.5  # U(-1, 1)
    batch = pool.gather([2, 0, 2])
    assert batch.shape == (3, 5, 2, 4, 2, 8)
    assert torch.equal(batch[0], pool.prompt(2)) and torch.equal(batch[1], pool.prompt(0))
    with pytest.raises(ValueError, match=r"task ids must lie in \[0, 2\]"):
        pool.gather([3])
    pool.init_from(1, 0)
    assert torch.equal(pool.prompt(1), pool.prompt(0))


def test_prompt_ensemble_and_single_trainable_prompt():
    pool = PromptPool(3, 1, 2, 1, 4)
    m = 0.1
    p2 = pool.ensembled(2, m)
    expected = (1 - m) * pool.prompt(2) + m * (pool.prompt(0) + pool.prompt(1)) / 2
    assert torch.allclose(p2, expected)
    assert torch.equal(pool.ensembled(0, m), pool.prompt(0))
    pool.train_only(2)
    p2.sum().backward()
    assert pool.prompts[0].grad is None and pool.prompts[1].grad is None
    assert torch.allclose(pool.prompts[2].grad, torch.full_like(pool.prompt(2), 1 - m))
    assert [p.requires_grad for p in pool.prompts] == [False, False, True]


def test_headwise_norga_gate_by_hand_and_equal_heads_equal_the_layer_gate():
    import math

    from conftest import tiny_vit
    from norga.models import PromptedViT

    gate = build_gate("norga_headwise", num_heads=2, activation="tanh")
    with torch.no_grad():
        gate.alpha.copy_(torch.tensor([0.5, 2.0]).view(2, 1, 1))
        gate.tau.copy_(torch.tensor([1.0, 3.0]).view(2, 1, 1))
    scores = torch.tensor([0.2, -1.0]).view(1, 1, 1, 2).expand(1, 2, 1, 2)  # (B, H, N, L)
    out = gate(scores)
    assert out[0, 0, 0].tolist() == pytest.approx([0.2 + 0.5 * math.tanh(0.2), -1.0 + 0.5 * math.tanh(-1.0)])
    assert out[0, 1, 0].tolist() == pytest.approx([0.2 + 2.0 * math.tanh(0.6), -1.0 + 2.0 * math.tanh(-3.0)])
    assert gate.report()["alpha_spread"] == pytest.approx(1.5) and gate.trains_on(0) and not gate.trains_on(1)
    with pytest.raises(ValueError, match="needs num_heads"):
        build_gate("norga_headwise")
    x = torch.randn(3, 3, 32, 32)
    prefix = torch.randn(3, 2, 2, 4, 2, 32)  # (B, P, 2, L, H, Dh) of tiny_vit (2 heads of 32)
    outputs = {}
    for name in ("norga", "norga_headwise"):
        model = PromptedViT(tiny_vit(seed=3), prompt_layers=(0, 1), gate=name, activation="sigmoid")
        for p in model.gate_parameters():
            p.data.fill_(0.6)  # equal values in every head
        outputs[name] = model(x, prefix)
        if name == "norga_headwise":
            model.gates[1].alpha.data[1] = 2.0  # one head's alpha differs: the output changes
            assert not torch.allclose(model(x, prefix), outputs[name])
    assert torch.allclose(outputs["norga"], outputs["norga_headwise"], atol=1e-6)
