"""Backbones: a timm ViT by name or preset, optionally with a local checkpoint file.

``build_backbone(preset="sup21k")`` or ``build_backbone(model_name=..., checkpoint=path)``
returns a timm ``VisionTransformer`` without head (``num_classes=0``).

Checkpoint files (``.pth``/``.pt``/``.pth.tar``, ``.safetensors``, ``.npz``) are
read with ``torch.load(weights_only=True)`` / safetensors / timm's own npz
loader. Published layouts are unwrapped by a registry of formats (iBOT
teacher ``backbone.``, MoCo v3 ``module.base_encoder.``, DINO / timm plain),
passed through timm's ``checkpoint_filter_fn`` (position-embedding resampling,
DINOv2 layouts) and loaded **strictly**: any mismatch raises
:class:`CheckpointError` listing missing and unexpected keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import timm
import torch
from timm.data import resolve_data_config
from timm.models.vision_transformer import checkpoint_filter_fn


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable or does not match the model."""


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


def register_format(name: str):
    def wrap(fn):
        CHECKPOINT_FORMATS[name] = fn
        return fn
    return wrap


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


def read_state_dict(path: Path) -> dict:
    """Load a .pth/.pt/.tar or .safetensors file into a plain ViT state dict."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            obj = load_file(str(path))
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any reader failure is the same user-facing problem
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path} does not hold a state dict (got {type(obj).__name__})")
    for name, unwrap in CHECKPOINT_FORMATS.items():
        sd = unwrap(obj)
        if sd:
            return sd
    raise CheckpointError(f"{path}: no ViT weights found (known layouts: {sorted(CHECKPOINT_FORMATS)}); "
                          f"first keys: {list(obj)[:8]}")


def load_checkpoint(model: torch.nn.Module, path, hint: str = "") -> None:
    """Load ``path`` strictly into ``model`` (a timm VisionTransformer, no head)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}" + (f"; get it from: {hint}" if hint else ""))
    if path.suffix == ".npz":
        try:
            model.load_pretrained(str(path))
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"cannot load npz checkpoint {path} into {type(model).__name__}: {err}") from err
        return
    sd = checkpoint_filter_fn(read_state_dict(path), model)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match {model.default_cfg.get('architecture', type(model).__name__)}: "
            f"{len(missing)} missing keys {missing[:10]}, {len(unexpected)} unexpected keys {unexpected[:10]}"
        )


def build_backbone(preset: Optional[str] = None, model_name: Optional[str] = None, checkpoint=None,
                   pretrained: bool = False, **timm_kwargs) -> torch.nn.Module:
    """timm ViT without head from a preset and/or timm name, weights from hub or a local file."""
    if preset is not None and preset not in BACKBONE_PRESETS:
        raise ValueError(f"unknown backbone preset {preset!r}; choose one of {sorted(BACKBONE_PRESETS)}")
    if preset is None and model_name is None:
        raise ValueError("give a backbone preset (e.g. 'sup21k') or a timm model name")
    spec = BACKBONE_PRESETS.get(preset)
    name = model_name or spec.model_name
    hub = pretrained and checkpoint is None
    if hub and preset in ("ibot21k", "ibot1k", "dino1k", "moco1k") and model_name is None:
        raise CheckpointError(f"preset {preset!r} needs a local checkpoint file: {spec.source}")
    try:
        model = timm.create_model(name, pretrained=hub, num_classes=0, **timm_kwargs)
    except RuntimeError as err:
        if "Unknown model" in str(err):
            raise ValueError(f"timm has no model {name!r}: {err}") from err
        raise
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
