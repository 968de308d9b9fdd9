"""Prompts as forward arguments: per-block prefixes, prepended prompt tokens, gradient checkpointing."""
from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F

from conftest import tiny_vit
from norga.models import PromptedViT, PromptInput

GATES = [("linear", {}), ("norga", {"activation": "tanh"}), ("norga", {"activation": "gelu"})]
ACTS = {"tanh": torch.tanh, "gelu": F.gelu}


def dualprompt_like(model, batch, seed=0, g_len=2, e_len=5):
    """Shared G-prompt (batch dim 1) of length g_len on blocks 0-1, per-sample E-prompts of length e_len on 2-4."""
    torch.manual_seed(seed)
    H, Dh = model.num_heads, model.head_dim
    prompts = {}
    for block in model.prompt_layers:
        shape = (1, H, g_len, Dh) if block < 2 else (batch, H, e_len, Dh)
        prompts[block] = (torch.empty(shape).uniform_(-1, 1).requires_grad_(),
                          torch.empty(shape).uniform_(-1, 1).requires_grad_())
    return prompts


def set_gates(model, value=0.7):
    for p in model.gate_parameters():  # move gates off their init so alpha/tau matter
        p.data.fill_(value)


def reference_attention(attn, x, keys, values, gate):
    """Eq. (11)/(12) written out with the block's weights (independent of norga's attention code)."""
    B, N, C = x.shape
    H, Dh = attn.num_heads, attn.head_dim
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).view(B, N, 3, H, Dh).permute(2, 0, 3, 1, 4)
    s_img = torch.einsum("bhnd,bhmd->bhnm", q, k) / math.sqrt(Dh)
    s_pre = torch.einsum("bhnd,bhld->bhnl", q, keys.expand(B, -1, -1, -1)) / math.sqrt(Dh)
    if gate.is_linear:
        g = s_pre
    else:
        g = s_pre + gate.alpha * ACTS[gate.activation](gate.tau * s_pre)
    w = torch.cat([g, s_img], dim=-1).softmax(dim=-1)
    L = keys.shape[2]
    out = w[..., :L] @ values.expand(B, -1, -1, -1) + w[..., L:] @ v
    return F.linear(out.transpose(1, 2).reshape(B, N, C), attn.proj.weight, attn.proj.bias)


def reference_features(model, x, prefixes):
    """Whole tiny ViT by hand (eval mode, no layer scale / drop path), prefixes per block."""
    vit = model.vit
    h = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
    for i, block in enumerate(vit.blocks):
        if i in prefixes:
            a = block.attn
            h = h + reference_attention(a, block.norm1(h), *prefixes[i], a.prefix_gate)
            h = h + block.mlp(block.norm2(h))
        else:
            h = block(h)
    return vit.norm(h)[:, 0]


@pytest.mark.parametrize("gate,opts", GATES, ids=[g + o.get("activation", "") for g, o in GATES])
def test_per_block_lengths_fast_explicit_and_reference(gate, opts):
    results = {}
    for path in ("fast", "explicit", "reference"):
        model = PromptedViT(tiny_vit(seed=1, depth=5), gate=gate, path=path if path != "reference" else "fast",
                            **opts).eval()
        set_gates(model)
        prefixes = dualprompt_like(model, batch=3)
        x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
        if path == "reference":
            out = reference_features(model, x, prefixes)
        else:
            out = model(x, PromptInput(prefixes=prefixes))
        (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
        grads = [t.grad for kv in prefixes.values() for t in kv] + [p.grad for p in model.gate_parameters()]
        results[path] = (out.detach(), grads)
    out_fast, grads_fast = results["fast"]
    for other in ("explicit", "reference"):
        out_ref, grads_ref = results[other]
        assert torch.allclose(out_fast, out_ref, atol=1e-5, rtol=0), other
        assert len(grads_fast) == len(grads_ref) == 10 + (10 if gate == "norga" else 0)
        for g_fast, g_ref in zip(grads_fast, grads_ref):
            assert g_ref.abs().max() > 0
            assert torch.allclose(g_fast, g_ref, atol=1e-5, rtol=1e-4), other


def test_per_block_call_at_one_length_equals_stacked_call():
    model = PromptedViT(tiny_vit(seed=3, depth=3), prompt_layers=(0, 2), gate="norga", activation="tanh").eval()
    torch.manual_seed(4)
    x = torch.randn(4, 3, 32, 32)
    stacked = torch.randn(4, *model.prompt_shape(3))
    by_hand = {b: (stacked[:, j, 0].transpose(1, 2).contiguous(), stacked[:, j, 1].transpose(1, 2).contiguous())
               for j, b in enumerate(model.prompt_layers)}
    with torch.no_grad():
        old = model(x, stacked)
        assert torch.equal(model(x, PromptInput.from_stacked(stacked, model.prompt_layers)), old)
        assert torch.equal(model(x, PromptInput(prefixes=by_hand)), old)
        assert torch.equal(model.forward_features(x, PromptInput(prefixes=by_hand)), model.forward_features(x, stacked))
        one = stacked[0]  # (P, 2, L, H, Dh), broadcast to the batch
        assert torch.equal(model(x, PromptInput.from_stacked(one, model.prompt_layers)), model(x, one))
        swapped = {b: (v, k) for b, (k, v) in by_hand.items()}  # keys and values mixed up must show
        assert not torch.allclose(model(x, PromptInput(prefixes=swapped)), old, atol=1e-4)


def test_per_sample_prompts_do_not_mix_across_the_batch():
    model = PromptedViT(tiny_vit(seed=5, depth=5), gate="norga", activation="gelu").eval()
    prefixes = dualprompt_like(model, batch=4, seed=6)
    tokens = torch.randn(4, 3, 64)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        full = PromptInput(prefixes=prefixes, tokens=tokens, pool="prompt_mean")
        batched = model(x, full)
        one_by_one = torch.cat([
            model(x[b:b + 1], PromptInput(prefixes={i: (k[:1] if k.shape[0] == 1 else k[b:b + 1],
                                                        v[:1] if v.shape[0] == 1 else v[b:b + 1])
                                                    for i, (k, v) in prefixes.items()},
                                          tokens=tokens[b:b + 1], pool="prompt_mean"))
            for b in range(4)])
        changed = {i: (k.clone(), v.clone()) for i, (k, v) in prefixes.items()}
        for i in (2, 3, 4):
            changed[i][0][1:] = torch.randn_like(changed[i][0][1:])
        other_tokens = tokens.clone()
        other_tokens[1:] = torch.randn_like(tokens[1:])
        first_again = model(x, PromptInput(prefixes=changed, tokens=other_tokens, pool="prompt_mean"))
        shared = model(x, PromptInput(prefixes={0: tuple(t.expand(4, -1, -1, -1) for t in prefixes[0])},
                                      tokens=tokens[:1].expand(4, -1, -1)))
        broadcast = model(x, PromptInput(prefixes={0: prefixes[0]}, tokens=tokens[:1]))
    assert torch.allclose(batched, one_by_one, atol=1e-5)
    assert torch.allclose(first_again[0], batched[0], atol=1e-6)
    assert not torch.allclose(first_again[1:], batched[1:], atol=1e-3)
    assert torch.equal(broadcast, shared)


def counting_norm1_calls(model):
    calls = []
    for block in model.vit.blocks:
        block.norm1.register_forward_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("kind", ["prefix", "stacked", "tokens"])
def test_gradient_checkpointing_gives_same_outputs_and_gradients(kind):
    results = {}
    for ckpt in (False, True):
        model = PromptedViT(tiny_vit(seed=7, depth=3, drop_path_rate=0.2, attn_drop_rate=0.1, proj_drop_rate=0.1),
                            prompt_layers=(0, 2), gate="norga", activation="tanh").train()
        model.freeze_backbone()
        model.vit.set_grad_checkpointing(ckpt)
        torch.manual_seed(8)
        x = torch.randn(3, 3, 32, 32)
        first_prompted = 1 if kind == "tokens" else 0  # blocks before it need no gradient, so no recomputation
        if kind == "tokens":
            leaves = [torch.randn(3, 4, 64, requires_grad=True)]
            prompts = PromptInput(tokens=leaves[0], token_block=1, pool="prompt_mean")
        elif kind == "stacked":
            leaves = [torch.randn(3, *model.prompt_shape(4), requires_grad=True)]
            prompts = leaves[0]
        else:
            prefixes = {0: (torch.randn(3, 2, 2, 32), torch.randn(3, 2, 2, 32)),
                        2: (torch.randn(1, 2, 6, 32), torch.randn(1, 2, 6, 32))}
            leaves = [t.requires_grad_() for kv in prefixes.values() for t in kv]
            prompts = PromptInput(prefixes=prefixes)
        calls = counting_norm1_calls(model)
        torch.manual_seed(9)  # same dropout / drop-path masks in both runs
        out = model(x, prompts)
        forward_calls = len(calls)
        (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
        gates = [] if kind == "tokens" else [p.grad for p in model.gate_parameters()]  # tokens: gates unused
        results[ckpt] = (out.detach(), [t.grad for t in leaves] + gates)
        assert forward_calls == 3
        assert len(calls) == forward_calls + (3 - first_prompted if ckpt else 0)  # checkpointing recomputes blocks
    (out_off, grads_off), (out_on, grads_on) = results[False], results[True]
    assert torch.equal(out_on, out_off)
    for g_on, g_off in zip(grads_on, grads_off):
        assert g_off.abs().max() > 0
        assert torch.allclose(g_on, g_off, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name,overrides,token_block", [
    ("vit_base_patch16_224", dict(img_size=32, patch_size=4, embed_dim=64, depth=3, num_heads=2), 0),
    ("vit_base_patch16_224", dict(img_size=32, patch_size=4, embed_dim=64, depth=3, num_heads=2), 2),
    ("vit_base_patch14_reg4_dinov2", dict(img_size=28, depth=2, embed_dim=64, num_heads=2), 0),
    ("vit_base_patch16_224", dict(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2, global_pool="avg"), 1),
])
def test_prepended_tokens_equal_timm_blocks_run_by_hand(name, overrides, token_block):
    torch.manual_seed(10)
    vit = timm.create_model(name, pretrained=False, num_classes=0, **overrides).eval()
    model = PromptedViT(vit, prompt_layers=(), gate="linear").eval()
    x = torch.randn(2, 3, overrides["img_size"], overrides["img_size"])
    tokens = torch.randn(2, 3, 64)
    npt = vit.num_prefix_tokens  # class token (+ 4 registers for the dinov2 reg4 model)
    with torch.no_grad():
        h = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))
        for i, block in enumerate(vit.blocks):
            if i == token_block:
                h = torch.cat([h[:, :npt], tokens, h[:, npt:]], dim=1)  # [cls, registers, prompts, patches]
            h = block(h)
        expected = vit.norm(h)
        without_prompts = torch.cat([expected[:, :npt], expected[:, npt + 3:]], dim=1)
        expected_pooled = vit.forward_head(without_prompts, pre_logits=True)  # class token, or avg + fc_norm
        prompts = PromptInput(tokens=tokens, token_block=token_block)
        feats = model.forward_features(x, prompts)
        by_token = model(x, prompts)
        by_mean = model(x, PromptInput(tokens=tokens, token_block=token_block, pool="prompt_mean"))
        broadcast = model(x, PromptInput(tokens=tokens[:1], token_block=token_block, pool="prompt_mean"))
        first = model(x, PromptInput(tokens=tokens[:1].expand(2, -1, -1), token_block=token_block, pool="prompt_mean"))
    assert feats.shape == (2, npt + 3 + vit.patch_embed.num_patches, 64)
    assert torch.allclose(feats, expected, atol=1e-6, rtol=0)
    assert torch.allclose(by_token, expected_pooled, atol=1e-6, rtol=0)
    if vit.global_pool == "token":
        assert torch.allclose(by_token, expected[:, 0], atol=1e-6, rtol=0)
    assert torch.allclose(by_mean, vit.fc_norm(expected[:, npt:npt + 3].mean(1)), atol=1e-6, rtol=0)
    assert not torch.allclose(by_mean, by_token, atol=1e-3)
    assert torch.equal(broadcast, first)


def test_prompted_block_is_timms_block_in_training_mode():
    """A prompted block re-runs timm's Block from its parts: layer scale, drop path and dropout included."""
    from norga.models.blockwise import prompted_block_forward

    vit = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0, img_size=28, depth=2,
                            embed_dim=64, num_heads=2, init_values=0.5, drop_path_rate=0.5, proj_drop_rate=0.2)
    block = vit.blocks[1]  # drop-path rate 0.5 (timm's rates rise linearly from 0 at block 0)
    model = PromptedViT(vit, prompt_layers=(1,)).train()
    x = torch.randn(8, 5, 64)
    empty = torch.zeros(8, 2, 0, 32)  # zero-length prefix: the attention equals timm's
    outs = []
    for run in (lambda: block(x), lambda: prompted_block_forward(block, x, empty, empty)):
        torch.manual_seed(13)  # same drop-path and dropout masks
        outs.append(run())
    assert model.training and not torch.allclose(outs[0], block.eval()(x), atol=1e-3)  # masks did act
    assert torch.allclose(outs[1], outs[0], atol=1e-6, rtol=0)


def test_tokens_and_prefixes_together_fast_equals_explicit():
    outs = []
    for path in ("fast", "explicit"):
        model = PromptedViT(tiny_vit(seed=11, depth=3), prompt_layers=(1, 2), gate="norga", activation="tanh",
                            path=path).eval()
        set_gates(model, 0.4)
        torch.manual_seed(12)
        prompts = PromptInput(prefixes={1: (torch.randn(2, 2, 3, 32), torch.randn(2, 2, 3, 32))},
                              tokens=torch.randn(2, 4, 64), pool="prompt_mean")
        with torch.no_grad():
            outs.append(model(torch.randn(2, 3, 32, 32), prompts))
    assert torch.allclose(outs[0], outs[1], atol=1e-5, rtol=0)


def test_bad_prompt_inputs_are_one_clear_error():
    model = PromptedViT(tiny_vit(depth=3), prompt_layers=(0, 1))
    x = torch.randn(2, 3, 32, 32)
    kv = lambda *shape: (torch.randn(*shape), torch.randn(*shape))
    per_block = r"prefix for block 0 must be \(keys, values\), each of shape \(B=2 or 1, H=2, L, Dh=32\)"
    cases = [
        (PromptInput(prefixes={0: kv(2, 3, 4, 32)}), per_block + r".*got keys \(2, 3, 4, 32\)"),
        (PromptInput(prefixes={0: kv(3, 2, 4, 32)}), per_block),
        (PromptInput(prefixes={0: (torch.randn(2, 2, 4, 32), torch.randn(2, 2, 5, 32))}), per_block),
        (PromptInput(prefixes={0: torch.randn(2, 2, 2, 4, 32)}), per_block + ".*; got Tensor"),
        (PromptInput(prefixes={2: kv(2, 2, 4, 32)}), r"prefix given for block 2, but only blocks \[0, 1\]"),
        (PromptInput(tokens=torch.randn(2, 4, 32)), r"prompt tokens must have shape \(B=2 or 1, L_p, D=64\)"),
        (PromptInput(tokens=torch.randn(2, 4, 64), token_block=3), r"token_block 3 must be a block index in \[0, 2\]"),
        (PromptInput(pool="prompt_mean"), "pool 'prompt_mean' needs prompt tokens"),
        (torch.randn(2, 2, 2, 4, 2), r"prefix must have shape \(B=2, P=2, 2, L, H=2, Dh=32\)"),
    ]
    for prompts, message in cases:
        with pytest.raises(ValueError, match=message):
            model(x, prompts)
    with pytest.raises(ValueError, match="unknown pool 'avg'"):
        PromptInput(pool="avg")
    with pytest.raises(TypeError, match="prompts must be None, a stacked prefix tensor"):
        model(x, [torch.randn(2, 2)])


def test_non_standard_blocks_are_refused():
    from timm.models.vision_transformer import ResPostBlock

    vit = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0, img_size=32, patch_size=4,
                            embed_dim=64, depth=2, num_heads=2, block_fn=ResPostBlock)
    with pytest.raises(TypeError, match="block 1 is a ResPostBlock; prompted blocks must be timm's standard"):
        PromptedViT(vit, prompt_layers=(1,))
