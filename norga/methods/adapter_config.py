"""The config fields APER and EASE share (torch-free; read before torch loads): LAMDA-PILOT's bottleneck adapter
and the SGD + cosine stage that trains it (:mod:`norga.methods.adapter_stage`). Registers no method."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, MethodConfig, _f


@dataclass
class AdapterTuningConfig(MethodConfig):
    """Base of the ``aper`` and ``ease`` sections: adapter width, scale and dropout; epochs, lr (SGD, momentum, weight
    decay, cosine decay to ``min_lr``) and batch size of the tuning stage. A subclass sets its own ``epochs`` and
    ``lr`` defaults; the rest are LAMDA-PILOT's (5240714) for both methods."""

    bottleneck: int = _f(64, ge=1)  # adapter width r; official ffn_num: 64
    adapter_scale: float = _f(0.1, gt=0.0)  # adapter output factor; official ffn_adapter_scalar: "0.1"
    adapter_dropout: float = _f(0.1, ge=0.0, le=1.0)  # inside the adapter; official Adapter(dropout=0.1)
    epochs: int = _f(20, ge=1)  # tuning epochs
    lr: float = _f(0.01, gt=0.0)  # SGD learning rate
    batch_size: int = _f(48, ge=1)  # official batch_size: 48 (ImageNet-R: 16; APER: its adapter run)
    weight_decay: float = _f(0.0005, ge=0.0)  # official: 0.0005 (ImageNet-R: 0.005; APER: its adapter run)
    momentum: float = _f(0.9, ge=0.0)  # SGD momentum; official: 0.9
    min_lr: float = _f(0.0, ge=0.0)  # end of the cosine decay (CosineAnnealingLR eta_min); official min_lr: 0

    def __post_init__(self):
        if not float(self.momentum) < 1.0:
            raise ConfigError(f"method.momentum={self.momentum}: SGD momentum must be below 1; official: 0.9")
        if float(self.min_lr) > float(self.lr):
            raise ConfigError(f"method.min_lr={self.min_lr} exceeds method.lr={self.lr}: the cosine decays from lr "
                              "down to min_lr; set min_lr <= lr (official: 0)")
