"""Exactness of prefix attention: against timm, fast vs explicit, and by hand (numpy)."""
from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

from conftest import tiny_vit
from norga.models import PromptedViT, PromptInput, PromptPool

GATE_CASES = [("linear", {}), ("norga", {"activation": "tanh"}), ("norga", {"activation": "sigmoid"}),
              ("norga", {"activation": "gelu"})]

# (timm name, overrides): every standard size and patch, shrunk in depth / image size for speed
BACKBONES = [
    ("vit_tiny_patch16_224", dict(img_size=48, depth=2)),
    ("vit_small_patch16_224", dict(img_size=64, depth=2)),
    ("vit_base_patch16_224", dict(img_size=32, depth=2, qkv_bias=False)),
    ("vit_large_patch16_224", dict(img_size=32, depth=1)),
    ("vit_small_patch8_224", dict(img_size=24, depth=2)),
    ("vit_small_patch14_dinov2", dict(img_size=28, depth=2)),
    ("vit_base_patch14_reg4_dinov2", dict(img_size=28, depth=2)),
]


def pooled_timm(vit, x):
    return vit.forward_head(vit.forward_features(x), pre_logits=True)


@pytest.mark.parametrize("name,overrides", BACKBONES, ids=[b[0] for b in BACKBONES])
def test_no_prompt_matches_timm_for_every_standard_vit(name, overrides):
    torch.manual_seed(0)
    vit = timm.create_model(name, pretrained=False, num_classes=0, **overrides).eval()
    x = torch.randn(2, 3, overrides["img_size"], overrides["img_size"])
    with torch.no_grad():
        feats = vit.forward_features(x)
        expected = vit.forward_head(feats, pre_logits=True)
        layers = tuple(range(min(5, len(vit.blocks))))
        model = PromptedViT(vit, prompt_layers=layers, gate="norga", activation="tanh").eval()
        got_none = model(x)
        empty = torch.zeros(2, len(layers), 2, 0, model.num_heads, model.head_dim)
        got_empty = model(x, empty)
        H, Dh, D = model.num_heads, model.head_dim, model.spec.embed_dim
        empty_input = PromptInput(prefixes={0: (torch.zeros(2, H, 0, Dh),) * 2}, tokens=torch.zeros(1, 0, D))
        for prompts in (None, PromptInput(), empty_input):  # the per-block inputs without prompts, too
            assert torch.allclose(model.forward_features(x, prompts), feats, atol=1e-6, rtol=0)
            assert torch.allclose(model(x, prompts), expected, atol=1e-6, rtol=0)
        # and a real prefix runs with the right output shape
        prefix = torch.randn(2, *model.prompt_shape(3))
        prompted = model(x, prefix)
        per_block = model(x, PromptInput(prefixes={layers[-1]: (torch.randn(2, H, 3, Dh), torch.randn(2, H, 3, Dh))}))
    assert not torch.equal(per_block, expected)
    assert torch.allclose(got_none, expected, atol=1e-6, rtol=0)
    assert torch.allclose(got_empty, expected, atol=1e-6, rtol=0)
    assert prompted.shape == expected.shape
    assert not torch.equal(prompted, expected)  # dinov2 layer-scale (1e-5 init) keeps the change small


@pytest.mark.parametrize("gate,opts", GATE_CASES, ids=[g + opts.get("activation", "") for g, opts in GATE_CASES])
def test_fast_path_equals_explicit_forward_and_backward(gate, opts):
    results = {}
    for path in ("fast", "explicit"):
        model = PromptedViT(tiny_vit(seed=1, depth=3), prompt_layers=(0, 2), gate=gate, path=path, **opts)
        model.freeze_backbone()
        for p in model.gate_parameters():  # move gates off their init so alpha/tau matter
            p.data.fill_(0.7)
        torch.manual_seed(2)
        pool = PromptPool(3, 2, 4, model.num_heads, model.head_dim)
        x = torch.randn(5, 3, 32, 32)
        out = model(x, pool.gather([0, 2, 1, 1, 0]))  # different prefixes per sample
        (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
        grads = [p.grad.clone() for p in pool.prompts] + [p.grad.clone() for p in model.gate_parameters()]
        results[path] = (out.detach(), grads)
    out_fast, grads_fast = results["fast"]
    out_ref, grads_ref = results["explicit"]
    assert torch.allclose(out_fast, out_ref, atol=1e-5, rtol=0)
    assert len(grads_fast) == len(grads_ref) == 3 + (4 if gate == "norga" else 0)
    for g_fast, g_ref in zip(grads_fast, grads_ref):
        assert g_ref.abs().max() > 0
        assert torch.allclose(g_fast, g_ref, atol=1e-5, rtol=1e-4)


def test_each_sample_uses_only_its_own_prefix():
    """Catches any reshape that mixes keys/values across the batch (the authors' bug)."""
    model = PromptedViT(tiny_vit(seed=3), prompt_layers=(0, 1), gate="norga", activation="gelu").eval()
    torch.manual_seed(4)
    x = torch.randn(4, 3, 32, 32)
    prefix = torch.randn(4, *model.prompt_shape(3))
    with torch.no_grad():
        batched = model(x, prefix)
        one_by_one = torch.cat([model(x[b : b + 1], prefix[b : b + 1]) for b in range(4)])
        changed = prefix.clone()
        changed[1:] = torch.randn_like(changed[1:])
        first_again = model(x, changed)[0]
        # the defective layout: (B, P, 2, ...) viewed as (P, 2, B, ...) / (P, B, 2, ...) without permute
        P = len(model.prompt_layers)
        mixed = prefix.permute(1, 2, 0, 3, 4, 5).reshape(4, P, 2, *prefix.shape[3:])
        wrong = model(x, mixed)
    assert torch.allclose(batched, one_by_one, atol=1e-5)
    assert torch.allclose(first_again, batched[0], atol=1e-6)
    assert not torch.allclose(wrong, batched, atol=1e-3)


def _numpy_head(x, Wq, Wk, Wv, pk, pv, gate_fn):
    """Eq. (11)/(12) for one head, written out per query token i."""
    N, L, dv = x.shape[0], pk.shape[0], Wq.shape[1]
    out = np.zeros((N, Wv.shape[1]))
    for i in range(N):
        q = x[i] @ Wq
        s_img = np.array([q @ (x[j] @ Wk) / np.sqrt(dv) for j in range(N)])
        s_pre = np.array([gate_fn(q @ pk[j] / np.sqrt(dv)) for j in range(L)])
        z = np.exp(s_img).sum() + np.exp(s_pre).sum()
        out[i] = sum(np.exp(s_img[j]) / z * (x[j] @ Wv) for j in range(N)) + sum(
            np.exp(s_pre[j]) / z * pv[j] for j in range(L)
        )
    return out


@pytest.mark.parametrize("activation,act_fn", [
    ("tanh", np.tanh), ("sigmoid", lambda z: 1 / (1 + np.exp(-z))),
    ("gelu", lambda z: 0.5 * z * (1 + np.vectorize(__import__("math").erf)(z / np.sqrt(2)))),
])
def test_one_head_matches_hand_computed_equations(activation, act_fn):
    model = PromptedViT(tiny_vit(seed=5, depth=1), prompt_layers=(0,), gate="norga", activation=activation)
    attn = model.prefix_attentions[0]
    alpha, tau = 0.6, 1.7
    attn.prefix_gate.alpha.data.fill_(alpha)
    attn.prefix_gate.tau.data.fill_(tau)
    rng = np.random.default_rng(0)
    B, N, C, H, Dh, L = 2, 7, 64, 2, 32, 3
    x = rng.standard_normal((B, N, C))
    pk, pv = rng.uniform(-1, 1, (2, B, H, L, Dh))
    prefix = (torch.tensor(pk, dtype=torch.float32), torch.tensor(pv, dtype=torch.float32))
    with torch.no_grad():
        qkv = attn.qkv(torch.tensor(x, dtype=torch.float32)).numpy()  # (B, N, 3C)
        heads = torch.tensor(x, dtype=torch.float32)
        got = attn(heads, prefix=prefix)  # (B, N, C) after proj
    W = attn.qkv.weight.detach().double().numpy()
    bias = attn.qkv.bias.detach().double().numpy()
    x_aug = np.concatenate([x, np.ones((B, N, 1))], axis=-1)  # fold qkv bias in as a constant input
    W_aug = np.concatenate([W, bias[:, None]], axis=1).T  # (C + 1, 3C)
    gate_fn = lambda s: s + alpha * act_fn(tau * s)
    heads_out = np.zeros((B, N, C))
    for b in range(B):
        for h in range(H):
            cols = lambda part: W_aug[:, part * C + h * Dh : part * C + (h + 1) * Dh]
            heads_out[b, :, h * Dh : (h + 1) * Dh] = _numpy_head(
                x_aug[b], cols(0), cols(1), cols(2), pk[b, h], pv[b, h], gate_fn
            )
    expected = heads_out @ attn.proj.weight.detach().double().numpy().T + attn.proj.bias.detach().double().numpy()
    assert np.allclose(qkv, x_aug @ W_aug, atol=1e-5)
    assert np.allclose(got.numpy(), expected, atol=1e-5)


def test_frozen_backbone_is_bit_identical_after_an_optimizer_step():
    model = PromptedViT(tiny_vit(seed=6), prompt_layers=(0, 1), gate="norga", activation="tanh")
    model.freeze_backbone()
    pool = PromptPool(2, 2, 4, model.num_heads, model.head_dim)
    head = torch.nn.Linear(model.embed_dim, 5)
    backbone_before = {k: v.clone() for k, v in model.vit.state_dict().items() if "prefix_gate" not in k}
    gates_before = [p.detach().clone() for p in model.gate_parameters()]
    trainable = [p for p in model.parameters() if p.requires_grad] + list(pool.parameters()) + list(head.parameters())
    optim = torch.optim.Adam(trainable, lr=0.1, weight_decay=0.01)
    model.train()
    loss = torch.nn.functional.cross_entropy(head(model(torch.randn(4, 3, 32, 32), pool.gather([0, 1, 0, 1]))),
                                             torch.tensor([0, 1, 2, 3]))
    loss.backward()
    optim.step()
    after = model.vit.state_dict()
    assert all(torch.equal(after[k], v) for k, v in backbone_before.items())
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"vit.blocks.{i}.attn.prefix_gate.{w}" for i in (0, 1) for w in ("alpha", "tau")
    }
    assert any(not torch.equal(a, b) for a, b in zip(gates_before, model.gate_parameters()))


def test_bad_prefix_shape_is_one_clear_error():
    model = PromptedViT(tiny_vit(), prompt_layers=(0, 1))
    with pytest.raises(ValueError, match=r"prefix must have shape \(B=2, P=2, 2, L, H=2, Dh=32\)"):
        model(torch.randn(2, 3, 32, 32), torch.randn(2, 3, 2, 4, 2, 32))


def test_bad_prompt_layers_and_unwrappable_models():
    with pytest.raises(ValueError, match=r"prompt_layers \[0, 5\] must be distinct block indices in \[0, 1\]"):
        PromptedViT(tiny_vit(), prompt_layers=(0, 5))
    with pytest.raises(TypeError, match="expected a timm VisionTransformer"):
        PromptedViT(torch.nn.Linear(3, 3))
