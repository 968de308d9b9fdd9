"""Local checkpoint files: read a published layout into a ViT state dict and load it strictly.

:func:`load_checkpoint` takes ``.pth``/``.pt``/``.pth.tar`` (``torch.load(weights_only=True)``),
``.safetensors`` or ``.npz`` (timm's own npz loader). :func:`read_state_dict` unwraps published layouts
through the registry :data:`CHECKPOINT_FORMATS` (iBOT teacher ``backbone.``, MoCo v3
``module.base_encoder.``, DINO / timm plain; add one with ``@register_format("name")``). Weights then go
through timm's ``checkpoint_filter_fn`` (position-embedding resampling, DINOv2 layouts) and load
**strictly**: tensors of other shapes, missing or unexpected keys raise one :class:`CheckpointError`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Optional

import torch
from timm.models.vision_transformer import checkpoint_filter_fn

from ..errors import NorgaError
from ..registry import registrar


class CheckpointError(NorgaError, RuntimeError):
    """A checkpoint file is missing, unreadable or does not match the model."""


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (its type name when empty): library errors can run to paragraphs."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ---- published checkpoint layouts -> plain timm-style state dicts ---------------
CHECKPOINT_FORMATS: Dict[str, Callable[[dict], Optional[dict]]] = {}


register_format = registrar(CHECKPOINT_FORMATS, "checkpoint format")  # decorator: @register_format("name")


def _strip(sd: dict, prefix: str, drop=()) -> dict:
    return {k[len(prefix):]: v for k, v in sd.items()
            if k.startswith(prefix) and not any(k[len(prefix):].startswith(d) for d in drop)}


def _prefixed(container: str, prefix: str):
    """A format whose backbone sits under ``prefix`` in ``obj[container]`` (or in ``obj`` itself); heads dropped."""
    def read(obj: dict) -> Optional[dict]:
        sd = obj.get(container) if isinstance(obj.get(container), dict) else obj
        return _strip(sd, prefix, drop=("head",)) if any(k.startswith(prefix) for k in sd) else None
    return read


register_format("ibot_teacher")(_prefixed("teacher", "backbone."))
register_format("moco_v3")(_prefixed("state_dict", "module.base_encoder."))


@register_format("plain")
def _plain(obj: dict) -> Optional[dict]:
    for key in ("model", "state_dict"):
        if isinstance(obj.get(key), dict):
            obj = obj[key]
    if any(k.startswith("blocks.") for k in obj):
        return {k: v for k, v in obj.items() if not k.startswith("head.")}
    return None


def _read_failure(path: Path, err: BaseException) -> CheckpointError:
    """A short diagnosis of an unreadable weights file (torch's own message can run to paragraphs)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if path.suffix != ".safetensors" and not head.startswith((b"PK", b"\x80")):
        why = "not a PyTorch checkpoint (neither zip nor pickle format)"
    elif "weights_only" in str(err) or "Unsupported global" in str(err):
        why = "it holds pickled Python objects besides tensors, which are not loaded for safety"
    else:
        why = first_line(err)
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
            raise CheckpointError(f"cannot load npz checkpoint {path} into {arch}: {first_line(err)}") from err
        return
    raw = read_state_dict(path)
    try:
        sd = checkpoint_filter_fn(raw, model)
    except Exception as err:  # noqa: BLE001 - e.g. position embeddings of another width
        raise CheckpointError(f"{path} does not match {arch}: {first_line(err)}") from err
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
