"""Backbones: a timm ViT by name or preset, optionally with a local checkpoint file.

``build_backbone(preset="sup21k")`` or ``build_backbone(model_name=..., checkpoint=path)``
returns a timm ``VisionTransformer`` without head (``num_classes=0``).

Checkpoint files (``.pth``/``.pt``/``.pth.tar``, ``.safetensors``, ``.npz``) are
read with ``torch.load(weights_only=True)`` / safetensors / timm's own npz
loader. Published layouts are unwrapped by a registry of formats (iBOT
teacher ``backbone.``, MoCo v3 ``module.base_encoder.``, DINO / timm plain),
passed through timm's ``checkpoint_filter_fn`` (position-embedding resampling,
DINOv2 layouts) and loaded **strictly**: any mismatch raises
:class:`CheckpointError` listing missing and unexpected keys (or the
tensors whose shapes differ).

Hub weights (``pretrained=True``, no checkpoint) are taken from the local
timm / Hugging Face cache when there (no network); otherwise a download is
tried only if the hub's host resolves, and any failure is one
:class:`WeightsUnavailable` naming ``model.checkpoint`` as the offline fix.
:func:`hub_weights_status` answers "are they here now?" for ``--dry-run``.
Config mistakes (unknown preset or timm name, bad ``timm_kwargs``) raise
:class:`norga.config.ConfigError` naming the key.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import urlparse

import timm
import torch
from timm.data import resolve_data_config
from timm.models.vision_transformer import checkpoint_filter_fn

from ..config import ConfigError
from ..errors import NorgaError
from ..registry import registrar


class CheckpointError(NorgaError, RuntimeError):
    """A checkpoint file is missing, unreadable or does not match the model."""


class WeightsUnavailable(CheckpointError):
    """``model.pretrained: true`` but the hub weights are neither cached nor downloadable now."""


@dataclass(frozen=True)
class BackbonePreset:
    model_name: str  # timm name, with the pretrained tag when timm has one
    source: str  # where a user gets the weights


BACKBONE_PRESETS: Dict[str, BackbonePreset] = {
    "sup21k": BackbonePreset("vit_base_patch16_224.orig_in21k",
                             "timm hub tag vit_base_patch16_224.orig_in21k (pretrained: true), or the original "
                             "Google ViT-B_16.npz (ImageNet-21k release of google-research/vision_transformer)"),
    "augreg_in21k": BackbonePreset("vit_base_patch16_224.augreg_in21k",
                                   "timm hub tag vit_base_patch16_224.augreg_in21k (pretrained: true)"),
    "ibot21k": BackbonePreset("vit_base_patch16_224", "iBOT ViT-B/16 ImageNet-22K teacher checkpoint "
                              "(bytedance/ibot repository, checkpoint_teacher.pth)"),
    "ibot1k": BackbonePreset("vit_base_patch16_224", "iBOT ViT-B/16 ImageNet-1K teacher checkpoint "
                             "(bytedance/ibot repository, checkpoint_teacher.pth)"),
    "dino1k": BackbonePreset("vit_base_patch16_224", "DINO ViT-B/16 backbone dino_vitbase16_pretrain.pth "
                             "(facebookresearch/dino repository)"),
    "moco1k": BackbonePreset("vit_base_patch16_224", "MoCo v3 ViT-B/16 vit-b-300ep.pth.tar "
                             "(facebookresearch/moco-v3 repository)"),
}

# ---- published checkpoint layouts -> plain timm-style state dicts ---------------
CHECKPOINT_FORMATS: Dict[str, Callable[[dict], Optional[dict]]] = {}


register_format = registrar(CHECKPOINT_FORMATS, "checkpoint format")  # decorator: @register_format("name")


def _strip(sd: dict, prefix: str, drop=()) -> dict:
    return {k[len(prefix):]: v for k, v in sd.items()
            if k.startswith(prefix) and not any(k[len(prefix):].startswith(d) for d in drop)}


@register_format("ibot_teacher")
def _ibot(obj: dict) -> Optional[dict]:
    sd = obj.get("teacher") if isinstance(obj.get("teacher"), dict) else obj
    if any(k.startswith("backbone.") for k in sd):
        return _strip(sd, "backbone.", drop=("head",))
    return None


@register_format("moco_v3")
def _moco(obj: dict) -> Optional[dict]:
    sd = obj.get("state_dict") if isinstance(obj.get("state_dict"), dict) else obj
    if any(k.startswith("module.base_encoder.") for k in sd):
        return _strip(sd, "module.base_encoder.", drop=("head",))
    return None


@register_format("plain")
def _plain(obj: dict) -> Optional[dict]:
    for key in ("model", "state_dict"):
        if isinstance(obj.get(key), dict):
            obj = obj[key]
    if any(k.startswith("blocks.") for k in obj):
        return {k: v for k, v in obj.items() if not k.startswith("head.")}
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _read_failure(path: Path, err: BaseException) -> CheckpointError:
    """A short diagnosis of an unreadable weights file (torch's own message can run to paragraphs)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if path.suffix != ".safetensors" and not head.startswith((b"PK", b"\x80")):
        why = "not a PyTorch checkpoint (neither zip nor pickle format)"
    elif "weights_only" in str(err) or "Unsupported global" in str(err):
        why = "it holds pickled Python objects besides tensors, which are not loaded for safety"
    else:
        why = _first_line(err)
    return CheckpointError(f"cannot read checkpoint {path}: {why}; is the file complete, and the right file "
                           "for model.checkpoint?")


def read_state_dict(path: Path) -> dict:
    """Load a .pth/.pt/.tar or .safetensors file into a plain ViT state dict."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            obj = load_file(str(path))
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any reader failure is the same user-facing problem
        raise _read_failure(path, err) from err
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path} does not hold a state dict (got {type(obj).__name__})")
    for name, unwrap in CHECKPOINT_FORMATS.items():
        sd = unwrap(obj)
        if sd:
            return sd
    raise CheckpointError(f"{path}: no ViT weights found (known layouts: {sorted(CHECKPOINT_FORMATS)}); "
                          f"first keys: {list(obj)[:8]}")


def _shape_mismatches(model: torch.nn.Module, sd: dict) -> list:
    """'key: file (shape) vs model (shape)' for tensors present in both with different shapes."""
    own = model.state_dict()
    return [f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}" for k, v in sd.items()
            if k in own and hasattr(v, "shape") and tuple(v.shape) != tuple(own[k].shape)]


def load_checkpoint(model: torch.nn.Module, path, hint: str = "") -> None:
    """Load ``path`` strictly into ``model`` (a timm VisionTransformer, no head)."""
    path = Path(path)
    arch = model.default_cfg.get("architecture", type(model).__name__)
    if path.is_dir():
        raise CheckpointError(f"model.checkpoint {path} is a folder; give the weights file itself")
    if not path.is_file():
        raise CheckpointError(f"model.checkpoint: file not found: {path} (relative paths start at {Path.cwd()})"
                              + (f"; get it from: {hint}" if hint else "; fix the path or set model.checkpoint=null"))
    if path.suffix == ".npz":
        try:
            model.load_pretrained(str(path))
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"cannot load npz checkpoint {path} into {arch}: {_first_line(err)}") from err
        return
    raw = read_state_dict(path)
    try:
        sd = checkpoint_filter_fn(raw, model)
    except Exception as err:  # noqa: BLE001 - e.g. position embeddings of another width
        raise CheckpointError(f"{path} does not match {arch}: {_first_line(err)}") from err
    wrong = _shape_mismatches(model, sd)
    if wrong:
        raise CheckpointError(f"{path} does not match {arch}: {len(wrong)} tensors have other shapes, e.g. "
                              f"{wrong[:3]}; is it a checkpoint of another architecture (model.name, "
                              "model.timm_kwargs)?")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match {arch}: "
            f"{len(missing)} missing keys {missing[:10]}, {len(unexpected)} unexpected keys {unexpected[:10]}"
        )


# ---- timm hub weights: local cache lookup (no network) and offline-safe creation ------------
def _hub_source(name: str) -> Tuple[str, object]:
    """(kind, location) of timm's pretrained weights for ``name``: ('hf-hub', (repo, [files])), ('url', url),
    ('file', path) or ('', None) when timm has no weights for it."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None:
        return "", None
    if cfg.hf_hub_id:
        files = [cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]
        return "hf-hub", (cfg.hf_hub_id, files)
    if cfg.file:
        return "file", cfg.file
    return ("url", cfg.url) if cfg.url else ("", None)


def cached_hub_weights(name: str) -> Optional[str]:
    """Path of timm's pretrained weights for ``name`` if they are on this machine now (no network)."""
    kind, where = _hub_source(name)
    if kind == "file":
        return str(where) if Path(where).is_file() else None
    if kind == "url":
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(where).path)
        return str(path) if path.is_file() else None
    if kind == "hf-hub":
        from huggingface_hub import try_to_load_from_cache

        repo, files = where
        repo_id, _, revision = repo.partition("@")
        for filename in files:
            found = try_to_load_from_cache(repo_id, filename, revision=revision or None)
            if isinstance(found, str) and Path(found).is_file():
                return found
    return None


def _hub_reachable(name: str) -> bool:
    """False when offline mode is set or the weights' host does not resolve (no download is tried)."""
    from huggingface_hub import constants

    kind, where = _hub_source(name)
    if kind == "hf-hub":
        if constants.HF_HUB_OFFLINE:
            return False
        host = urlparse(constants.ENDPOINT).hostname
    else:
        host = urlparse(str(where)).hostname
    try:
        socket.getaddrinfo(host, 443)
    except (OSError, UnicodeError):
        return False
    return True


def _unavailable(name: str, why: str) -> WeightsUnavailable:
    return WeightsUnavailable(f"model.pretrained: timm hub weights for {name} {why}; without internet, put the "
                              "weights file on this machine and set model.checkpoint=PATH (and model.pretrained="
                              "false), or download them once where there is internet (timm caches them)")


def _create_hub_model(name: str, **timm_kwargs) -> torch.nn.Module:
    """timm model with hub weights: from the local cache if there, else downloaded (one-line error if not)."""
    kind, _ = _hub_source(name)
    if not kind:
        raise ConfigError(f"model.pretrained: timm has no pretrained weights for {name!r}; use a tagged name "
                          "(e.g. vit_base_patch16_224.augreg_in21k) or set model.checkpoint")
    path = cached_hub_weights(name)
    if path is not None:
        return timm.create_model(name, pretrained=True, num_classes=0, pretrained_cfg_overlay={"file": path},
                                 **timm_kwargs)
    if not _hub_reachable(name):
        raise _unavailable(name, "are not in the local cache and the hub cannot be reached (offline)")
    try:
        return timm.create_model(name, pretrained=True, num_classes=0, **timm_kwargs)
    except (OSError, RuntimeError, ValueError) as err:  # network, hub and file errors of the download
        raise _unavailable(name, f"could not be downloaded ({_first_line(err)})") from err


def hub_weights_status(name: str) -> str:
    """For --dry-run: where the hub weights are, or WeightsUnavailable when they are not on this machine."""
    path = cached_hub_weights(name)
    if path is None:
        raise _unavailable(name, "are not in the local cache (a dry run never downloads; training would try)")
    return f"timm hub weights, cached at {path}"


def build_backbone(preset: Optional[str] = None, model_name: Optional[str] = None, checkpoint=None,
                   pretrained: bool = False, **timm_kwargs) -> torch.nn.Module:
    """timm ViT without head from a preset and/or timm name, weights from hub or a local file."""
    if preset is not None and preset not in BACKBONE_PRESETS:
        raise ConfigError(f"model.preset: unknown backbone preset {preset!r}; choose one of {sorted(BACKBONE_PRESETS)}")
    if preset is None and model_name is None:
        raise ConfigError("model: give a backbone preset (model.preset, e.g. 'sup21k') or a timm model name "
                          "(model.name)")
    spec = BACKBONE_PRESETS.get(preset)
    name = model_name or spec.model_name
    hub = pretrained and checkpoint is None
    if hub and preset in ("ibot21k", "ibot1k", "dino1k", "moco1k") and model_name is None:
        raise CheckpointError(f"preset {preset!r} needs a local checkpoint file: {spec.source}")
    if not timm.is_model(name):
        raise ConfigError(f"model.name: timm has no model {name!r} (list them with timm.list_models('vit*'))")
    try:
        model = (_create_hub_model(name, **timm_kwargs) if hub
                 else timm.create_model(name, pretrained=False, num_classes=0, **timm_kwargs))
    except (TypeError, AssertionError) as err:  # bad timm_kwargs: unknown argument, inconsistent sizes
        raise ConfigError(f"model.timm_kwargs: timm cannot build {name} with {timm_kwargs}: "
                          f"{_first_line(err)}") from err
    if checkpoint is not None:
        load_checkpoint(model, checkpoint, spec.source if spec else "")
    return model


def backbone_data_config(model: torch.nn.Module) -> dict:
    """mean, std, input_size (3, H, W), crop_pct from the model's timm pretrained config.

    ``input_size`` is the size the model was built for (e.g. after ``img_size=112``).
    """
    cfg = dict(resolve_data_config({}, model=model))
    size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if size is not None:
        cfg["input_size"] = (3, *tuple(size))
    return cfg
