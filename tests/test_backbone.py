"""Checkpoint formats written from a tiny ViT, strict loading, clear errors, real DINOv2 (opt-in)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from norga.models.backbone import BACKBONE_PRESETS, backbone_data_config, build_backbone
from norga.models.checkpoints import CheckpointError, load_checkpoint

TINY = dict(model_name="vit_base_patch16_224", img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)


def tiny(seed: int, **overrides):
    torch.manual_seed(seed)
    return build_backbone(**{**TINY, **overrides})


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def write_formats(source, tmp_path):
    sd = source.state_dict()
    head = {"head.weight": torch.zeros(3, 64), "head.bias": torch.zeros(3)}
    files = {
        "plain.pth": sd,
        "dino.pth": {**sd},
        "ibot.pth": {"teacher": {**{f"backbone.{k}": v for k, v in sd.items()},
                                 "head.mlp.0.weight": torch.zeros(2, 2)}, "epoch": 100},
        "moco.pth.tar": {"state_dict": {**{f"module.base_encoder.{k}": v for k, v in sd.items()},
                                        "module.base_encoder.head.0.weight": torch.zeros(2, 2),
                                        "module.predictor.0.weight": torch.zeros(2, 2)}},
        "timm_with_head.pth": {**sd, **head},
    }
    for name, obj in files.items():
        torch.save(obj, tmp_path / name)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "weights.safetensors"))
    return list(files) + ["weights.safetensors"]


def test_every_published_format_loads_exactly(tmp_path):
    source = tiny(0)
    for name in write_formats(source, tmp_path):
        target = tiny(1)
        load_checkpoint(target, tmp_path / name)
        assert_same_weights(source, target)


def test_build_backbone_with_checkpoint_and_pos_embed_resampling(tmp_path):
    source = tiny(0)
    torch.save(source.state_dict(), tmp_path / "w.pth")
    same = build_backbone(**TINY, checkpoint=tmp_path / "w.pth")
    assert_same_weights(source, same)
    bigger = build_backbone(**{**TINY, "img_size": 48}, checkpoint=tmp_path / "w.pth")
    assert bigger.pos_embed.shape == (1, 1 + 12 * 12, 64)
    assert torch.equal(bigger.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)


def test_mismatch_missing_file_and_garbage_are_clear_errors(tmp_path):
    sd = tiny(0).state_dict()
    del sd["blocks.1.mlp.fc2.weight"]
    sd["blocks.1.extra"] = torch.zeros(1)
    torch.save(sd, tmp_path / "bad.pth")
    with pytest.raises(CheckpointError, match=r"1 missing keys \['blocks.1.mlp.fc2.weight'\], 1 unexpected keys"):
        load_checkpoint(tiny(1), tmp_path / "bad.pth")
    with pytest.raises(CheckpointError, match="model.checkpoint: file not found: .*nope.pth .*; get it from: DINO"):
        build_backbone(preset="dino1k", checkpoint=tmp_path / "nope.pth")
    (tmp_path / "garbage.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(tiny(1), tmp_path / "garbage.pth")
    torch.save({"foo": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(CheckpointError, match="no ViT weights found"):
        load_checkpoint(tiny(1), tmp_path / "other.pth")


def test_presets_and_errors():
    assert {"sup21k", "augreg_in21k", "ibot21k", "ibot1k", "dino1k", "moco1k"} <= set(BACKBONE_PRESETS)
    assert BACKBONE_PRESETS["sup21k"].model_name == "vit_base_patch16_224.orig_in21k"
    with pytest.raises(ValueError, match="unknown backbone preset 'vit'"):
        build_backbone(preset="vit")
    with pytest.raises(CheckpointError, match="needs a local checkpoint file"):
        build_backbone(preset="moco1k", pretrained=True)
    vit = build_backbone(preset="sup21k", img_size=32, patch_size=16, depth=1)  # architecture only, no download
    assert backbone_data_config(vit)["mean"] == (0.5, 0.5, 0.5)
    assert backbone_data_config(vit)["input_size"] == (3, 32, 32)


def test_real_dinov2_weights_load_strictly(shared_dir):
    path = shared_dir / "weights" / "dinov2_vits14_imgfocus.safetensors"
    if not path.is_file():
        pytest.skip("real DINOv2 weights absent")
    vit = build_backbone(model_name="vit_small_patch14_dinov2", checkpoint=path, img_size=56)
    cfg = backbone_data_config(vit)
    assert np.allclose(cfg["mean"], (0.485, 0.456, 0.406)) and cfg["input_size"] == (3, 56, 56)
    assert vit.pos_embed.shape[1] == 1 + 4 * 4
    with torch.no_grad():
        assert torch.isfinite(vit(torch.randn(1, 3, 56, 56))).all()


def write_original_vit_npz(vit, path):
    """Export a timm ViT in the original google-research ViT .npz naming (ViT-B_16.npz layout)."""
    t = {k: v.detach().numpy() for k, v in vit.state_dict().items()}
    H = vit.blocks[0].attn.num_heads
    D = t["cls_token"].shape[-1]
    out = {"embedding/kernel": t["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
           "embedding/bias": t["patch_embed.proj.bias"], "cls": t["cls_token"],
           "Transformer/posembed_input/pos_embedding": t["pos_embed"],
           "Transformer/encoder_norm/scale": t["norm.weight"], "Transformer/encoder_norm/bias": t["norm.bias"]}
    for i in range(len(vit.blocks)):
        b, p = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        out[p + "LayerNorm_0/scale"], out[p + "LayerNorm_0/bias"] = t[b + "norm1.weight"], t[b + "norm1.bias"]
        out[p + "LayerNorm_2/scale"], out[p + "LayerNorm_2/bias"] = t[b + "norm2.weight"], t[b + "norm2.bias"]
        for j, name in enumerate(("query", "key", "value")):
            w = t[b + "attn.qkv.weight"][j * D : (j + 1) * D]
            out[p + f"MultiHeadDotProductAttention_1/{name}/kernel"] = w.T.reshape(D, H, D // H)
            out[p + f"MultiHeadDotProductAttention_1/{name}/bias"] = \
                t[b + "attn.qkv.bias"][j * D : (j + 1) * D].reshape(H, -1)
        out[p + "MultiHeadDotProductAttention_1/out/kernel"] = \
            t[b + "attn.proj.weight"].reshape(D, H, -1).transpose(1, 2, 0)
        out[p + "MultiHeadDotProductAttention_1/out/bias"] = t[b + "attn.proj.bias"]
        for r in range(2):
            out[p + f"MlpBlock_3/Dense_{r}/kernel"] = t[b + f"mlp.fc{r + 1}.weight"].T
            out[p + f"MlpBlock_3/Dense_{r}/bias"] = t[b + f"mlp.fc{r + 1}.bias"]
    np.savez(path, **out)


def test_original_vit_npz_loads_exactly(tmp_path):
    source = tiny(0)
    write_original_vit_npz(source, tmp_path / "ViT-tiny.npz")
    target = tiny(1)
    load_checkpoint(target, tmp_path / "ViT-tiny.npz")
    for (k, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), k
    (tmp_path / "broken.npz").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="cannot load npz checkpoint"):
        load_checkpoint(tiny(1), tmp_path / "broken.npz")
