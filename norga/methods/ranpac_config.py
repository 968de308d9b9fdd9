"""Config section of the ``ranpac`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config
from .adapter_config import TUNINGS, TuningStageFields


@dataclass
class FirstSessionConfig(TuningStageFields):
    """RanPAC's optional phase 1: a parameter-efficient tuning trained on task 0 only, then frozen; every feature
    (the projection's input) comes from the tuned backbone. Names as APER's options; defaults: the official CIFAR-100
    row (RanPAC/RanPAC 698e00cc, args/cifar224_publish.csv ID 7, inc_net.py get_convnet, RanPAC.py _train)."""

    config_prefix: ClassVar[str] = "method.first_session"
    # none: no phase 1 (the frozen backbone; runs unchanged); official: adapter (CIFAR, CUB, ...), ssf (ImageNet-R/A,
    # VTAB), vpt (deep; Cars, OmniBenchmark)
    tuning: str = _f("none", choices=("none",) + TUNINGS)
    # blocks that get adapters / prompts / SSF; null: every block (official)
    tuned_layers: Optional[List[int]] = _f(None)
    prompt_length: int = _f(5, ge=1)  # VPT-deep tokens per block; official: Prompt_Token_num=5 (hard-coded)


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
    projection_dim: int = _f(10000, ge=1)  # M, columns of the Gaussian projection W (D x M); official code: 10000
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
