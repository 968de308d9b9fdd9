"""Backbones from the Hugging Face Hub, offline: a cache folder built here (HF cache layout, HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors.torch import save_file

from norga.config import ConfigError
from norga.models.backbone import build_backbone
from norga.models.hub_weights import WeightsUnavailable, split_reference, weights_file

ARCH = dict(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)  # configs/smoke.yaml's
REPO = "someorg/tiny-vit"
REVISION = "a" * 40


def write_repo(cache, repo: str, state_dict: dict, config: dict = None):
    """``repo``'s snapshot in the HF cache layout: models--ORG--NAME/{refs/main, snapshots/<rev>/...}."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(REVISION)
    save_file({k: v.contiguous() for k, v in state_dict.items()}, str(snapshot / "model.safetensors"))
    if config is not None:
        (snapshot / "config.json").write_text(json.dumps(config))
    return snapshot / "model.safetensors"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty HF cache under tmp_path, offline (both the env vars and huggingface_hub's constants)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def tiny_weights(seed: int) -> dict:
    torch.manual_seed(seed)
    return build_backbone(model_name="vit_tiny_patch16_224", **ARCH).state_dict()


def assert_weights_equal(model, saved: dict):
    own = model.state_dict()
    assert own.keys() == saved.keys()
    assert all(torch.equal(own[k], saved[k]) for k in own)


def test_hf_hub_checkpoint_loads_from_the_offline_cache_and_its_checksum_is_the_file(hub_cache):
    saved = tiny_weights(0)
    path = write_repo(hub_cache, REPO, saved)
    model = build_backbone(model_name="vit_tiny_patch16_224", checkpoint=f"hf-hub:{REPO}", **ARCH)
    assert_weights_equal(model, saved)
    model_cfg = type("M", (), dict(checkpoint=f"hf-hub:{REPO}@main", pretrained=False, name=None))
    assert weights_file(model_cfg) == str(path)
    from norga.engine.tracker import checkpoint_id

    assert checkpoint_id(weights_file(model_cfg)) == hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_timm_hf_hub_model_name_builds_architecture_and_weights_from_the_cache(hub_cache):
    saved = tiny_weights(1)
    config = {"architecture": "vit_tiny_patch16_224", "num_classes": 0, "model_args": ARCH,
              "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.1, 0.2, 0.3], "std": [0.5, 0.5, 0.5]}}
    write_repo(hub_cache, REPO, saved, config)
    model = build_backbone(model_name=f"hf_hub:{REPO}", pretrained=True)
    assert_weights_equal(model, saved)
    assert tuple(model.pretrained_cfg["mean"]) == (0.1, 0.2, 0.3)
    random = build_backbone(model_name=f"hf-hub:{REPO}", pretrained=False)  # the architecture only
    assert random.pos_embed.shape == model.pos_embed.shape and not torch.equal(random.pos_embed, model.pos_embed)


def test_missing_from_the_offline_cache_is_one_error_naming_cache_repo_and_fix(hub_cache):
    with pytest.raises(WeightsUnavailable) as err:
        build_backbone(model_name="vit_tiny_patch16_224", checkpoint="hf-hub:otherorg/absent", **ARCH)
    text = str(err.value)
    assert "\n" not in text
    assert str(hub_cache) in text and "otherorg/absent" in text and "HF_HUB_OFFLINE" in text
    assert "download otherorg/absent" in text and "model.checkpoint" in text
    with pytest.raises(WeightsUnavailable, match="config.json of Hub repo otherorg/absent"):
        build_backbone(model_name="hf_hub:otherorg/absent")


def test_reference_syntax():
    assert split_reference("hf-hub:org/name", "k") == ("org/name", None, None)
    assert split_reference("hf-hub:org/name/sub/w.pth@v1", "k") == ("org/name", "sub/w.pth", "v1")
    with pytest.raises(ConfigError, match="model.checkpoint: 'hf-hub:justname' is not a Hub repo"):
        split_reference("hf-hub:justname", "model.checkpoint")


def hub_train(tmp_path, *extra: str) -> list:
    from faults import train_args

    return ["train", *train_args(tmp_path / "run", *extra)]


def test_smoke_config_with_a_hub_checkpoint_dry_run_train_and_checksum(hub_cache, tmp_path, capsys):
    """``norga train``: the cached Hub file is loaded strictly (--dry-run), trained on, and its sha256 is in
    metrics.json; an absent one is one problem line and leaves no run folder."""
    from faults import assert_one_line_error
    from norga.commands.cli import main as norga

    torch.manual_seed(0)
    smoke_arch = dict(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)
    path = write_repo(hub_cache, REPO, build_backbone(model_name="vit_base_patch16_224", **smoke_arch).state_dict())
    hub = ["--set", f"model.checkpoint=hf-hub:{REPO}"]
    status = norga(hub_train(tmp_path, *hub, "--dry-run"))
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    assert f"Hub file hf-hub:{REPO}, cached at {hub_cache}" in out and "(loaded strictly: OK)" in out
    assert norga(hub_train(tmp_path, *hub)) == 0, capsys.readouterr().err[-2000:]
    backbone = json.loads((tmp_path / "run" / "metrics.json").read_text())["backbone"]
    assert backbone["checkpoint"] == f"hf-hub:{REPO}"
    assert backbone["checkpoint_sha256_16"] == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    capsys.readouterr()
    absent = ["--set", "model.checkpoint=hf-hub:otherorg/absent"]
    for dry in (["--dry-run"], []):
        status = norga(hub_train(tmp_path / "other", *absent, *dry))
        assert_one_line_error(status, capsys.readouterr().err, "otherorg/absent", str(hub_cache), "hf download")
        assert not (tmp_path / "other" / "run").exists()


def test_reproduce_counts_a_cached_hub_checkpoint_as_present(hub_cache):
    from norga.config import Config
    from norga.reproduce.inputs import hub_weights_cached, missing_inputs

    write_repo(hub_cache, REPO, tiny_weights(0))
    hub_weights_cached.cache_clear()
    cfg = Config()
    cfg.model.name, cfg.model.checkpoint = "vit_tiny_patch16_224", f"hf-hub:{REPO}"
    assert missing_inputs(cfg, "cifar100", "tiny") == []
    cfg.model.checkpoint = "hf-hub:otherorg/absent"
    assert "not in the timm / Hugging Face cache" in missing_inputs(cfg, "cifar100", "tiny")[0]
    hub_weights_cached.cache_clear()
