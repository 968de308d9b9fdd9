"""Config section of the ``aper`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import MethodConfig, _f, method_config
from .tuning_section import TUNINGS, check_tuning_options


@method_config("aper", module="norga.methods.aper")
@dataclass
class APERConfig(MethodConfig):
    """APER (ADAM): tune the frozen ViT on the first task only (adapter, VPT-deep or SSF), then classify every task
    by cosine to class prototypes of the concatenated [frozen, tuned] features (no training after task 0).

    Zhou, Cai, Ye, Zhan, Liu, "Revisiting Class-Incremental Learning with Pre-Trained Models: Generalizability and
    Adaptivity are All You Need" (IJCV 2024). Defaults: LAMDA-CL/LAMDA-PILOT at 5240714 (``exps/aper_aperpter.json``,
    ``models/aper_*.py``, ``backbone/vit_adapter.py``); docs/methods/aper.md lists every source and difference.
    """

    name: str = _f("aper")
    # how task 0 tunes the backbone: official exps aper_aperpter / aper_vpt_deep / aper_ssf (default: the adapter)
    tuning: str = _f("adapter", choices=TUNINGS)
    tuned_layers: Optional[List[int]] = _f(None)  # blocks that get adapters / prompts / SSF; null: every block (official)
    bottleneck: int = _f(64, ge=1)  # adapter width r; official ffn_num: 64
    adapter_scale: float = _f(0.1, gt=0.0)  # adapter output factor; official ffn_adapter_scalar: "0.1"
    adapter_dropout: float = _f(0.1, ge=0.0, le=1.0)  # inside the adapter; official Adapter(dropout=0.1)
    prompt_length: int = _f(5, ge=1)  # VPT-deep tokens per block; official aper_vpt_deep.json: 5 (ImageNet-R: 30)
    epochs: int = _f(20, ge=1)  # task-0 tuning epochs; official tuned_epoch: 20 (ImageNet-R adapter: 10)
    lr: float = _f(0.01, gt=0.0)  # SGD; official init_lr: 0.01 (ImageNet-R adapter: 0.05)
    batch_size: int = _f(48, ge=1)  # official batch_size: 48 (ImageNet-R adapter: 16)
    weight_decay: float = _f(0.0005, ge=0.0)  # official: 0.0005 (ImageNet-R adapter: 0.005)
    momentum: float = _f(0.9, ge=0.0)  # SGD momentum; official: 0.9
    min_lr: float = _f(0.0, ge=0.0)  # end of the cosine decay (CosineAnnealingLR eta_min); official min_lr: 0

    def __post_init__(self):
        check_tuning_options(self, "method")
