"""L2P: top-k key matching and the surrogate loss by hand, per-sample selection, token placement against timm,
the pull loss's sign, selection counts, and a run that resumes and re-evaluates identically."""
from __future__ import annotations


import pytest
import torch

from conftest import (build_run_parts,
                      load_run_method, loaders_of)
from faults import assert_kill_then_resume_matches, tiny_method_args
from norga.config import ConfigError, load_config
from norga.methods.l2p import pull_loss, top_k_keys
from conftest import L2P, SMOKE, TINY_DATA


def tiny_args(out) -> list:
    return tiny_method_args(out, L2P[0])


def test_top_k_matching_and_pull_loss_by_hand():
    """Keys along the axes of R^3; query (3, 4, 0) has cosines 0.6, 0.8, 0, -0.6 with e1, e2, e3, -e1."""
    keys = torch.tensor([[2.0, 0, 0], [0, 5.0, 0], [0, 0, 1.0], [-1.0, 0, 0]])
    query = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, -2.0]])
    sim, chosen = top_k_keys(query, keys, 2)
    assert torch.allclose(sim[0], torch.tensor([0.6, 0.8, 0.0, -0.6]))
    assert chosen.tolist() == [[1, 0], [0, 1]]  # second query: cos 0, 0, -1, 0 -> ties to the lower index
    assert pull_loss(sim, chosen).item() == pytest.approx((0.8 + 0.6 + 0 + 0) / 2)


def test_config_checks_top_k_against_the_pool():
    with pytest.raises(ConfigError, match="method.top_k=6 exceeds method.pool_size=4"):
        load_config(SMOKE, ["method={name: l2p, pool_size: 4, top_k: 6}"])
    m = load_config(SMOKE, ["method={name: l2p}"]).method
    assert (m.pool_size, m.prompt_length, m.top_k, m.pull_coeff, m.epochs, m.batch_size) == (10, 5, 5, 0.1, 5, 16)


def test_run_selection_counts_and_the_pull_towards_queries(l2p_run):
    cfg, out, metrics = l2p_run
    assert metrics["completed_tasks"] == 3 and metrics["tii_accuracy"] is None
    counts = metrics["method"]["selection_counts"]
    assert [sum(counts[str(t)]) for t in range(3)] == [2 * 12 * 2] * 3  # 24 training images x top-2, last epoch
    # the surrogate loss pulls the selected keys towards the queries: their mean cosine rises over training
    _, bench, initial = build_run_parts(cfg)
    _, _, trained = load_run_method(out)
    x, _ = next(iter(loaders_of(cfg, bench, initial, 0).train_plain))
    with torch.no_grad():
        query = initial.model(x)
    before = top_k_keys(query, initial.keys, 2)[0].topk(2, dim=1).values.mean()
    after = top_k_keys(query, trained.keys, 2)[0].topk(2, dim=1).values.mean()
    assert after > before + 0.05


def test_prompt_tokens_follow_the_class_token_with_its_position_embedding(l2p_run):
    """f(x) by timm's modules: [cls + pos_0, P_chosen + pos_0, patches + pos], mean of the prompt outputs."""
    cfg, out, _ = l2p_run
    _, bench, method = load_run_method(out)
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    x, vit = x[:3], method.model.vit
    chosen = torch.tensor([[0, 1], [3, 2], [1, 1]])
    with torch.no_grad():
        tokens = vit._pos_embed(vit.patch_embed(x))
        prompts = method.prompts[chosen].flatten(1, 2) + vit.pos_embed[0, 0]
        tokens = torch.cat([tokens[:, :1], prompts, tokens[:, 1:]], dim=1)
        expected = vit.norm(vit.blocks(vit.norm_pre(tokens)))[:, 1:1 + 4].mean(1)
        assert torch.allclose(method.model(x, method.tokens(chosen)), expected, atol=1e-5)


def test_the_norga_authors_layout_by_hand():
    """The NoRGa authors' L2P (cross-checked in docs/crosscheck.md): prompts without a position embedding before
    [cls + pos_0, patches + pos], the head reading the class token; norga: prompt_pos_embed none, head_pool token."""
    cfg = load_config(SMOKE, TINY_DATA + L2P + ["method.prompt_pos_embed=none", "method.head_pool=token"])
    _, bench, method = build_run_parts(cfg)
    x, _ = next(iter(loaders_of(cfg, bench, method, 0).test))
    x, vit = x[:3], method.model.vit
    chosen = torch.tensor([[0, 1], [3, 2], [1, 1]])
    with torch.no_grad():
        tokens = vit._pos_embed(vit.patch_embed(x))
        tokens = torch.cat([method.prompts[chosen].flatten(1, 2), tokens], dim=1)  # 4 prompt tokens first
        expected = vit.norm(vit.blocks(vit.norm_pre(tokens)))[:, 4]
        assert torch.allclose(method.model(x, method.tokens(chosen)), expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bar:l2p:1"])  # evaluation kills: tests/test_contract.py
def test_kill_and_resume_gives_the_uninterrupted_metrics(spec, l2p_run, tmp_path):
    assert_kill_then_resume_matches(tiny_args, spec, tmp_path, reference=l2p_run[1])  # the module's run
