"""Which inputs of a run are on this machine: its data folder and its backbone weights (``norga reproduce --dry-run``).

A cell with a config is runnable *here* only when its data and weights are present: ``data.root`` exists (or
``data.download: true`` fetches it), ``model.checkpoint`` is a file, and ``pretrained: true`` weights are in
the local timm / Hugging Face cache (a dry run never downloads). :func:`missing_inputs` names what is not,
each with the option or command that provides it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import List, Optional

from ..config.schema import is_hub_reference


def missing_inputs(cfg, benchmark: str, row: str) -> List[str]:
    """What a run of ``cfg`` (a cell of ``benchmark`` and backbone ``row``) needs and this machine lacks."""
    missing = []
    root = cfg.data.root
    if root and not cfg.data.download and not Path(root).exists():
        missing.append(f"data {root} ({prepare_command(benchmark, root)}--data {benchmark}=PATH)")
    model = cfg.model
    if model.checkpoint and not is_hub_reference(model.checkpoint):
        if not Path(model.checkpoint).is_file():
            missing.append(f"weights {model.checkpoint} (--weights {row}=PATH)")
    elif model.pretrained or model.checkpoint:
        cached = hub_weights_cached(model.preset, model.name, model.checkpoint)
        if cached is None:
            missing.append(f"weights of {row}: not checked, torch or timm does not import (norga doctor)")
        elif not cached:
            missing.append(f"weights of {row}: not a local file and not in the timm / Hugging Face cache "
                           f"(--weights {row}=PATH, or download them once where there is internet)")
    return missing


def prepare_command(benchmark: str, root: str) -> str:
    """'norga data prepare BENCHMARK --root ROOT, or ' when norga can prepare that benchmark, else ''."""
    try:
        from ..data.prepare import PREPARERS, get_preparer

        get_preparer("cifar100")  # registers the shipped preparers
    except Exception:  # noqa: BLE001 - a broken torch install: only the --data option is suggested
        return ""
    return f"norga data prepare {benchmark} --root {root}, or " if benchmark in PREPARERS else ""


@functools.lru_cache(maxsize=None)
def hub_weights_cached(preset: Optional[str], name: Optional[str], checkpoint: Optional[str] = None
                       ) -> Optional[bool]:
    """Whether timm's pretrained weights of the backbone are in the local cache (no network); None when torch or
    timm cannot be imported. A preset without hub weights (iBOT, DINO, MoCo) is never cached."""
    try:
        from ..models.backbone import BACKBONE_PRESETS, LOCAL_ONLY_PRESETS, cached_hub_weights
        from ..models.hub_weights import WeightsUnavailable, checkpoint_file, model_folder
    except Exception:  # noqa: BLE001 - a broken torch install: the dry run says the weights were not checked
        return None
    try:  # hf-hub: checkpoint or timm hf_hub: name: the repo's files in the Hugging Face cache
        if checkpoint:
            return bool(checkpoint_file(checkpoint, download=False))
        if is_hub_reference(name):
            return bool(model_folder(name, pretrained=True, download=False)[1])
    except WeightsUnavailable:
        return False
    if name is None and preset in LOCAL_ONLY_PRESETS:
        return False
    timm_name = name or (BACKBONE_PRESETS[preset].model_name if preset in BACKBONE_PRESETS else None)
    return timm_name is not None and cached_hub_weights(timm_name) is not None
