"""Backbones: a timm ViT by name or preset, optionally with a local checkpoint file.

``build_backbone(preset="sup21k")`` or ``build_backbone(model_name=..., checkpoint=path)``
returns a timm ``VisionTransformer`` without head (``num_classes=0``).

Checkpoint files are read and loaded strictly by :mod:`norga.models.checkpoints`
(:func:`~norga.models.checkpoints.load_checkpoint`): any mismatch raises
:class:`~norga.models.checkpoints.CheckpointError` listing missing and unexpected keys
(or the tensors whose shapes differ).

Hub weights (``pretrained=True``, no checkpoint) are taken from the local
timm / Hugging Face cache when there (no network); otherwise a download is
tried only if the hub's host resolves, and any failure is one
:class:`WeightsUnavailable` naming ``model.checkpoint`` as the offline fix.
:func:`hub_weights_status` answers "are they here now?" for ``--dry-run``.
``model.checkpoint: hf-hub:ORG/NAME`` and timm's ``hf_hub:ORG/NAME`` names go through
:mod:`norga.models.hub_weights` (local cache first, ``HF_HUB_OFFLINE`` honoured).
Config mistakes (unknown preset or timm name, bad ``timm_kwargs``) raise
:class:`norga.config.ConfigError` naming the key.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple
from urllib.parse import urlparse

import timm
import torch
from timm.data import resolve_data_config

from ..config import ConfigError
from .checkpoints import CheckpointError, first_line, load_checkpoint
from .hub_weights import WeightsUnavailable, checkpoint_file, is_hub_reference, model_folder


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
LOCAL_ONLY_PRESETS = ("ibot21k", "ibot1k", "dino1k", "moco1k")  # no timm hub weights: model.checkpoint is needed


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
        raise _unavailable(name, f"could not be downloaded ({first_line(err)})") from err


def hub_weights_status(name: str) -> str:
    """For --dry-run: where the hub weights are, or WeightsUnavailable when they are not on this machine."""
    if is_hub_reference(name):
        return f"Hub weights, cached at {model_folder(name, pretrained=True, download=False)[1]}"
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
    if hub and preset in LOCAL_ONLY_PRESETS and model_name is None:
        raise CheckpointError(f"preset {preset!r} needs a local checkpoint file: {spec.source}")
    if is_hub_reference(name):  # timm's hf_hub:ORG/NAME: architecture from the repo's config.json
        folder, checkpoint_path = model_folder(name, pretrained=hub)
        name = f"local-dir:{folder}"
        checkpoint, hub = checkpoint if checkpoint is not None else checkpoint_path, False
    elif not timm.is_model(name):
        raise ConfigError(f"model.name: timm has no model {name!r} (list them with timm.list_models('vit*'))")
    try:
        model = (_create_hub_model(name, **timm_kwargs) if hub
                 else timm.create_model(name, pretrained=False, num_classes=0, **timm_kwargs))
    except (TypeError, AssertionError) as err:  # bad timm_kwargs: unknown argument, inconsistent sizes
        raise ConfigError(f"model.timm_kwargs: timm cannot build {name} with {timm_kwargs}: "
                          f"{first_line(err)}") from err
    if checkpoint is not None:
        path = checkpoint_file(checkpoint) if is_hub_reference(checkpoint) else checkpoint
        load_checkpoint(model, path, spec.source if spec else "")
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
