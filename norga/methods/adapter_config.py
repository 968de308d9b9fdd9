"""Config fields of the adapter tunings (torch-free; read before torch loads): the tuning names, LAMDA-PILOT's
bottleneck adapter and the SGD + cosine stage that trains it (:mod:`norga.methods.adapter_stage`). Shared by the
``aper`` and ``ease`` sections and RanPAC's ``method.first_session``. Registers no method."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import ConfigError, MethodConfig, _f

TUNINGS = ("adapter", "vpt_deep", "ssf")  # parallel bottleneck adapters, VPT-deep prompts, SSF (models/adapters.py)


def check_tuning_options(opts, prefix: str) -> None:
    """Raise a ConfigError naming ``prefix.<key>`` when ``opts`` (momentum, lr, min_lr and, if it has them,
    tuned_layers) cannot run: momentum >= 1, a cosine floor above the lr, or an empty list of tuned blocks."""
    if not float(opts.momentum) < 1.0:
        raise ConfigError(f"{prefix}.momentum={opts.momentum}: SGD momentum must be below 1; official: 0.9")
    if float(opts.min_lr) > float(opts.lr):
        raise ConfigError(f"{prefix}.min_lr={opts.min_lr} exceeds {prefix}.lr={opts.lr}: the cosine decays from lr "
                          "down to min_lr; set min_lr <= lr (official: 0)")
    layers = getattr(opts, "tuned_layers", None)
    if layers is not None and not layers:
        raise ConfigError(f"{prefix}.tuned_layers=[]: tune at least one block, or null for every block")


@dataclass
class TuningStageFields:
    """Adapter width, scale and dropout; epochs, lr (SGD, momentum, weight decay, cosine decay to ``min_lr``) and
    batch size of the tuning stage. Defaults: LAMDA-PILOT (5240714) for APER and EASE, which RanPAC's official
    CIFAR-100 row shares; a subclass may set its own ``epochs`` and ``lr`` defaults. ``config_prefix``: where the
    fields sit in a config (for error messages)."""

    config_prefix: ClassVar[str] = "method"
    bottleneck: int = _f(64, ge=1)  # adapter width r; official ffn_num: 64
    adapter_scale: float = _f(0.1, gt=0.0)  # adapter output factor; official ffn_adapter_scalar: "0.1"
    adapter_dropout: float = _f(0.1, ge=0.0, le=1.0)  # inside the adapter; official Adapter(dropout=0.1)
    epochs: int = _f(20, ge=1)  # tuning epochs; official tuned_epoch: 20
    lr: float = _f(0.01, gt=0.0)  # SGD learning rate; official init_lr / body_lr: 0.01
    batch_size: int = _f(48, ge=1)  # official batch_size: 48 (ImageNet-R: 16; APER: its adapter run)
    weight_decay: float = _f(0.0005, ge=0.0)  # official: 0.0005 (ImageNet-R: 0.005; APER: its adapter run)
    momentum: float = _f(0.9, ge=0.0)  # SGD momentum; official: 0.9
    min_lr: float = _f(0.0, ge=0.0)  # end of the cosine decay (CosineAnnealingLR eta_min); official min_lr: 0

    def __post_init__(self):
        check_tuning_options(self, self.config_prefix)


@dataclass
class AdapterTuningConfig(TuningStageFields, MethodConfig):
    """Base of the ``aper`` and ``ease`` sections (``name`` first, then the tuning fields)."""
