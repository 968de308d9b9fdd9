"""SD-LoRA (norga/methods/sd_lora.py): the magnitude / direction decomposition recomputed explicitly, old
directions frozen while old magnitudes train, the magnitude reset, the RR ranks, and the smoke run through
``norga train``."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import (assert_predictions_per_sample, assert_reevaluation_identical, build_run_parts,
                      checkpoint_method_state, loaders_of, tiny_vit)
from norga.commands.cli import main as norga
from norga.config import ConfigError, load_config
from norga.methods.sd_lora import component_coefficients, direction_norm, rank_of
from norga.models.lora_qkv import LoRAQKV

SD_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "sd_lora.yaml"


def wrapper_with_components(norm: str, alphas=(0.5, 1.2, 0.7)):
    qkv = tiny_vit().blocks[0].attn.qkv
    wrapper = LoRAQKV(qkv, ("q", "v"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for rank in (3, 2, 2):
            branch = wrapper.add_branch(rank)
            branch.down.copy_(torch.randn(branch.down.shape, generator=g))
            branch.up.copy_(torch.randn(branch.up.shape, generator=g))
    magnitudes = [torch.tensor(a) for a in alphas]
    wrapper.coefficients = lambda w: component_coefficients(list(w.branches), magnitudes, norm)
    return qkv, wrapper, magnitudes


@pytest.mark.parametrize("norm", ["factors", "product"])
def test_decomposition_recomputed_explicitly(norm):
    """W_p = W0_p + sum_(i<t) alpha_i B_i A_i / n_i + alpha_t B_t A_t, n_i = ||B_i|| ||A_i|| or ||B_i A_i||."""
    qkv, wrapper, alphas = wrapper_with_components(norm)
    weight = qkv.weight.detach().clone()
    for p, slot in enumerate((0, 2)):  # q is the first block of 64 outputs, v the third
        rows = slice(slot * 64, (slot + 1) * 64)
        for i, branch in enumerate(wrapper.branches):
            a, b = branch.down[p].detach(), branch.up[p].detach()
            n = torch.linalg.norm(b) * torch.linalg.norm(a) if norm == "factors" else torch.linalg.norm(b @ a)
            weight[rows] += alphas[i] * (b @ a) / (n if i < 2 else 1.0)  # the newest is not normalised
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(wrapper(x), x @ weight.T + qkv.bias, atol=2e-4, rtol=1e-5)
    torch.testing.assert_close(wrapper(x)[..., 64:128], qkv(x)[..., 64:128])  # k untouched


def test_product_normalised_directions_have_unit_frobenius_norm():
    _, wrapper, alphas = wrapper_with_components("product", alphas=(1.0, 1.0, 1.0))
    coef = component_coefficients(list(wrapper.branches), alphas, "product")
    for i in range(2):
        for p in range(2):
            direction = coef[i, p] * wrapper.branches[i].product()[p]
            assert float(torch.linalg.norm(direction.detach())) == pytest.approx(1.0, rel=1e-5)
    factors = direction_norm(wrapper.branches[0], "factors")
    assert (factors >= direction_norm(wrapper.branches[0], "product") - 1e-4).all()  # ||BA|| <= ||B|| ||A||


def test_rank_of_task_ranks():
    assert [rank_of(t, 10, None) for t in range(3)] == [10, 10, 10]
    assert [rank_of(t, 10, [10, 10, 10, 10, 8, 8, 8, 8, 6, 6]) for t in (0, 3, 4, 7, 8, 12)] == [10, 10, 8, 8, 6, 6]


def _snapshot(method):
    return [(b.down.detach().clone(), b.up.detach().clone()) for w in method.wrappers.values() for b in w.branches]


def test_old_directions_frozen_old_magnitudes_trained_and_reset():
    cfg = load_config(SD_SMOKE, ["method.epochs=1", "method.task_ranks=[4, 3]"])
    cfg, bench, method = build_run_parts(cfg)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    trained0 = float(method.magnitudes[0].detach())
    assert trained0 != pytest.approx(0.8)
    before = _snapshot(method)
    method.learn_task(1, loaders_of(cfg, bench, method, 1))
    first = next(iter(method.wrappers.values()))
    assert [b.rank for b in first.branches] == [4, 3]
    after = _snapshot(method)
    olds = [after[i] for i in range(0, len(after), 2)]  # branch 0 of every block
    for (a0, b0), (a1, b1) in zip(before, olds):
        assert torch.equal(a0, a1) and torch.equal(b0, b1)  # the old direction's factors are unchanged
    alpha0 = float(method.magnitudes[0].detach())
    assert alpha0 != pytest.approx(0.8) and alpha0 != pytest.approx(trained0)  # reset to 0.8, then trained
    assert all(not p.requires_grad for b in first.branches[:1] for p in b.parameters())
    params = method.start_task(2)  # reset (official): every magnitude back to 0.8 when a task starts
    assert [float(a.detach()) for a in method.magnitudes] == pytest.approx([0.8] * 3)
    assert [b.rank for b in first.branches] == [4, 3, 3]  # past the list: its last rank
    assert all(any(p is a for p in params) for a in method.magnitudes)  # every magnitude trains in task 2


def test_carry_keeps_the_learned_magnitudes():
    cfg = load_config(SD_SMOKE, ["method.epochs=1", "method.magnitudes=carry"])
    cfg, bench, method = build_run_parts(cfg)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    learned = float(method.magnitudes[0].detach())
    method.start_task(1)
    assert float(method.magnitudes[0].detach()) == learned


# ---- the smoke run ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sd_run(tmp_path_factory):
    import json

    out = tmp_path_factory.mktemp("runs") / "sd_lora"
    assert norga(["train", "--config", str(SD_SMOKE), "--output-dir", str(out)]) == 0
    return load_config(out / "config.yaml"), out, json.loads((out / "metrics.json").read_text())


def test_run_freezes_directions_and_keeps_magnitudes(sd_run):
    cfg, out, metrics = sd_run
    states = [checkpoint_method_state(out, t) for t in range(3)]
    for t in (1, 2):
        for key, branches in states[t]["branches"].items():
            assert len(branches) == t + 1
            for s in range(t):
                assert torch.equal(branches[s]["down"], states[s]["branches"][key][s]["down"])
                assert torch.equal(branches[s]["up"], states[s]["branches"][key][s]["up"])
        assert states[t]["magnitudes"].shape == (t + 1,)
        assert not torch.equal(states[t]["magnitudes"][:t], states[t - 1]["magnitudes"][:t])  # old ones moved
    assert len(metrics["method"]["magnitudes"]) == 3 and metrics["completed_tasks"] == 3


def test_run_is_reevaluable_and_per_sample(sd_run):
    cfg, out, metrics = sd_run
    assert_reevaluation_identical(out, metrics)
    assert_predictions_per_sample(cfg, out, 1)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.task_ranks"):
        load_config(SD_SMOKE, ["method.task_ranks=[4, 0]"])
    with pytest.raises(ConfigError, match="method.magnitudes"):
        load_config(SD_SMOKE, ["method.magnitudes=keep"])


@pytest.mark.slow
def test_kill_and_resume_gives_the_uninterrupted_metrics(tmp_path):
    from faults import assert_kill_then_resume_matches, tiny_method_args

    method = "method={name: sd_lora, rank: 4, epochs: 2, batch_size: 16, lr: 0.01}"
    assert_kill_then_resume_matches(lambda out: tiny_method_args(out, method), "bar:sd_lora:1", tmp_path)
