"""APER (norga/methods/aper.py, norga/models/adapters.py): the tuning wrappers against hand computations on a tiny
ViT, the concatenated prototypes and logits recomputed by hand from a smoke run through ``norga train``, and the
tuning trained on task 0 only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import adapted_by_hand, build_run_parts, loaders_of, timm_features, tiny_vit, train_smoke_run
from norga.config import ConfigError, load_config
from norga.methods.aper import concat_cosine
from norga.models.adapters import add_adapters, attach_adapter_blocks, attach_deep_prompts, attach_ssf, tuning

APER_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "aper.yaml"


def test_an_adapter_block_is_timm_when_off_and_the_parallel_formula_when_on():
    vit = tiny_vit()
    x = torch.randn(3, 3, 32, 32)
    plain = timm_features(vit, x)
    blocks = attach_adapter_blocks(vit, [0, 1])
    add_adapters(blocks, 64, 8, 0.1, 0.0)
    for b in blocks:  # a fresh adapter adds nothing (up is zero); give it weights that do
        torch.nn.init.normal_(b.tuned[0].up.weight)
        torch.nn.init.normal_(b.tuned[0].up.bias)
    vit.eval()
    assert torch.equal(timm_features(vit, x), plain)  # no tuning active: timm's block
    with tuning(vit, 0):
        on = timm_features(vit, x)
    by_hand = adapted_by_hand(vit, x, [b.tuned[0].state_dict() for b in blocks])
    assert torch.allclose(on, by_hand, atol=1e-5) and not torch.allclose(on, plain, atol=1e-3)


def test_vpt_deep_appends_tokens_to_every_block_and_drops_them_after():
    vit = tiny_vit()
    x = torch.randn(2, 3, 32, 32)
    plain = timm_features(vit, x)
    wrapped = attach_deep_prompts(vit, [0, 1], 3)
    for w in wrapped:
        torch.nn.init.normal_(w.tuned.tokens)
    vit.eval()
    assert torch.equal(timm_features(vit, x), plain)
    tokens = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
    for w in wrapped:
        n = tokens.shape[1]
        tokens = w.block(torch.cat([tokens, w.tuned.tokens.expand(2, -1, -1)], dim=1))[:, :n]
    with tuning(vit, 0):
        assert torch.allclose(timm_features(vit, x), vit.norm(tokens)[:, 0], atol=1e-5)


def test_ssf_scales_and_shifts_the_official_places():
    vit = tiny_vit()
    x = torch.randn(2, 3, 32, 32)
    plain = timm_features(vit, x)
    wrapped = attach_ssf(vit, [0, 1])
    assert len(wrapped) == 1 + 6 * 2 + 1  # patch projection, 6 per block, final norm
    vit.eval()
    assert torch.equal(timm_features(vit, x), plain)
    z = torch.randn(4, 64)
    with tuning(vit, 0):
        assert not torch.allclose(timm_features(vit, x), plain, atol=1e-4)
        final = vit.norm
        assert torch.allclose(final(z), final.module(z) * final.tuned.scale + final.tuned.shift)
        conv = vit.patch_embed.proj  # a conv: scale and shift per output channel (dim 1)
        out = conv.module(x)
        assert torch.allclose(conv(x), out * conv.tuned.scale[None, :, None, None]
                              + conv.tuned.shift[None, :, None, None])


def test_concat_cosine_by_hand():
    feats = torch.tensor([[3.0, 0.0, 0.0, 4.0]])
    protos = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    # |f| = 5: cosines 3/5, 4/5, 1 — the whole 4-vector normalised, not each half
    assert torch.allclose(concat_cosine(feats, protos), torch.tensor([[0.6, 0.8, 1.0]]))


@pytest.fixture(scope="module")
def aper_run(tmp_path_factory):
    return train_smoke_run(tmp_path_factory, APER_SMOKE, "aper")


def _states(out):
    return [torch.load(p, weights_only=True)["method"] for p in sorted((out / "checkpoints").glob("task_*.pt"))]


def test_prototypes_are_frozen_and_adapted_means_by_hand(aper_run):
    """p_c = [mean frozen feature, mean adapted feature] over c's un-augmented images; logits cos([f, g], p)."""
    cfg, out, metrics = aper_run
    _, bench, method = build_run_parts(cfg)
    vit = method.model.vit
    vit.eval()
    final = _states(out)[-1]
    adapters = [{k.split(".", 2)[2]: v for k, v in final["tuned"].items() if k.startswith(f"{i}.0.")}
                for i in range(2)]

    def both(x):
        with torch.no_grad():
            return torch.cat([timm_features(vit, x), adapted_by_hand(vit, x, adapters)], dim=1)

    protos = torch.zeros_like(final["prototypes"])
    for task in range(3):
        xs, ys = zip(*loaders_of(cfg, bench, method, task).train_plain)
        feats, labels = both(torch.cat(xs)), torch.cat(ys)
        for c in bench.task_classes[task]:
            protos[c] = feats[labels == c].mean(0)
    assert torch.allclose(final["prototypes"], protos, atol=1e-5)
    for task in range(3):
        xs, ys = zip(*loaders_of(cfg, bench, method, task).test)
        logits = F.normalize(both(torch.cat(xs)), dim=-1) @ F.normalize(protos, dim=-1).T
        acc = (logits.argmax(1) == torch.cat(ys)).double().mean().item()
        assert metrics["acc_matrix"][task][2] == pytest.approx(acc, abs=1e-9)


def test_the_tuning_trains_on_task_0_only_and_stays_frozen(aper_run):
    cfg, out, metrics = aper_run
    _, _, fresh = build_run_parts(cfg)
    states = _states(out)
    assert len(states) == 3
    init = fresh.tuned.state_dict()
    moved = [k for k in init if not torch.equal(init[k], states[0]["tuned"][k])]
    assert any("up.weight" in k for k in moved)  # task 0 trained the adapters
    for later in states[1:]:
        assert all(torch.equal(states[0]["tuned"][k], later["tuned"][k]) for k in init)
    log = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert {row["task"] for row in log if row["stage"] == "aper"} == {0}
    assert metrics["method"]["tuning"] == "adapter" and metrics["method"]["prototypes"] == 6


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.min_lr"):
        load_config(APER_SMOKE, ["method.min_lr=1.0"])
    with pytest.raises(ConfigError, match="method.tuning"):
        load_config(APER_SMOKE, ["method.tuning=lora"])
    with pytest.raises(ConfigError, match="method.momentum"):
        load_config(APER_SMOKE, ["method.momentum=1.0"])
