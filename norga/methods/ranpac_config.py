"""Config section of the ``ranpac`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config
from .tuning_section import TUNINGS, check_tuning_options


@dataclass
class FirstSessionConfig:
    """RanPAC's optional phase 1: a parameter-efficient tuning trained on task 0 only, then frozen; every feature
    (the projection's input) comes from the tuned backbone. Names as APER's options; defaults: the official CIFAR-100
    row (RanPAC/RanPAC 698e00cc, args/cifar224_publish.csv ID 7, inc_net.py get_convnet, RanPAC.py _train)."""

    # none: no phase 1 (the frozen backbone; runs unchanged); official: adapter (CIFAR, CUB, ...), ssf (ImageNet-R/A,
    # VTAB), vpt (deep; Cars, OmniBenchmark)
    tuning: str = _f("none", choices=("none",) + TUNINGS)
    tuned_layers: Optional[List[int]] = _f(None)  # blocks that get adapters / prompts / SSF; null: every block (official)
    bottleneck: int = _f(64, ge=1)  # adapter width r; official: ffn_num=64 (hard-coded in get_convnet)
    adapter_scale: float = _f(0.1, gt=0.0)  # adapter output factor; official: ffn_adapter_scalar "0.1"
    adapter_dropout: float = _f(0.1, ge=0.0, le=1.0)  # inside the adapter; official: Adapter(dropout=0.1)
    prompt_length: int = _f(5, ge=1)  # VPT-deep tokens per block; official: Prompt_Token_num=5 (hard-coded)
    epochs: int = _f(20, ge=1)  # official: tuned_epoch 20 (every dataset)
    lr: float = _f(0.01, gt=0.0)  # SGD on the tuning and the cosine head; official: body_lr 0.01 (head_lr unused)
    batch_size: int = _f(48, ge=1)  # official: batch_size 48
    weight_decay: float = _f(0.0005, ge=0.0)  # official: weight_decay 0.0005
    momentum: float = _f(0.9, ge=0.0)  # official: optim.SGD(momentum=0.9)
    min_lr: float = _f(0.0, ge=0.0)  # cosine floor (CosineAnnealingLR eta_min, stepped per epoch); official: min_lr 0

    def __post_init__(self):
        check_tuning_options(self, "method.first_session")


@method_config("ranpac", module="norga.methods.ranpac")
@dataclass
class RanPACConfig(MethodConfig):
    """RanPAC: features through a fixed random projection and ReLU, then a ridge classifier from the incrementally
    summed Gram matrix (no task id, no replay). Without ``first_session`` (default) nothing is trained and the
    features are the frozen backbone's (the paper's "no PETL" rows); with it, a tuning is trained on task 0 only
    and frozen, and every feature comes from the tuned backbone (the paper's full method).

    McDonnell et al., "RanPAC: Random Projections and Pre-trained Models for Continual Learning" (NeurIPS 2023);
    docs/methods/ranpac.md.
    """

    name: str = _f("ranpac")
    projection_dim: int = _f(10000, ge=1)  # M, columns of the Gaussian projection W (D x M); official/paper: 10000
    activation: str = _f("relu", choices=("relu", "identity"))  # after the projection; official: relu
    # candidate ridge values lambda; official: 10.0 ** np.arange(-8, 9), i.e. 1e-8 ... 1e8
    ridges: List[float] = _f([10.0 ** e for e in range(-8, 9)])
    # share of the current task's (shuffled) training samples held out to choose lambda; official: the last 20%
    val_fraction: float = _f(0.2, gt=0.0)
    first_session: FirstSessionConfig = field(default_factory=FirstSessionConfig)  # phase 1 (tuning: none = off)

    def __post_init__(self):
        if not self.ridges or any(float(r) <= 0 for r in self.ridges):
            raise ConfigError(f"method.ridges={self.ridges}: needs at least one value and every value > 0; "
                              "official: [1e-8, 1e-7, ..., 1e8]")
        if not 0.0 < float(self.val_fraction) < 1.0:
            raise ConfigError(f"method.val_fraction={self.val_fraction}: must lie strictly between 0 and 1 "
                              "(a part of the task's samples fits, the rest chooses lambda); official: 0.2")
