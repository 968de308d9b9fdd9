"""Config section of the ``aper`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import _f, method_config
from .adapter_config import TUNINGS, AdapterTuningConfig


@method_config("aper", module="norga.methods.aper")
@dataclass
class APERConfig(AdapterTuningConfig):
    """APER (ADAM): tune the frozen ViT on the first task only (adapter, VPT-deep or SSF), then classify every task
    by cosine to class prototypes of the concatenated [frozen, tuned] features (no training after task 0).

    Zhou, Cai, Ye, Zhan, Liu, "Revisiting Class-Incremental Learning with Pre-Trained Models: Generalizability and
    Adaptivity are All You Need" (IJCV 2024). Defaults: LAMDA-CL/LAMDA-PILOT at 5240714 (``exps/aper_aperpter.json``,
    ``models/aper_*.py``, ``backbone/vit_adapter.py``); docs/methods/aper.md lists every source and difference.
    """

    name: str = _f("aper")
    # how task 0 tunes the backbone: official exps aper_aperpter / aper_vpt_deep / aper_ssf (default: the adapter)
    tuning: str = _f("adapter", choices=TUNINGS)
    # blocks that get adapters / prompts / SSF; null: every block (official)
    tuned_layers: Optional[List[int]] = _f(None)
    prompt_length: int = _f(5, ge=1)  # VPT-deep tokens per block; official aper_vpt_deep.json: 5 (ImageNet-R: 30)
    epochs: int = _f(20, ge=1)  # task-0 tuning epochs; official tuned_epoch: 20 (ImageNet-R adapter: 10)
    lr: float = _f(0.01, gt=0.0)  # SGD; official init_lr: 0.01 (ImageNet-R adapter: 0.05)
