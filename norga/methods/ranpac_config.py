"""Config section of the ``ranpac`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from ..config import ConfigError, MethodConfig, _f, method_config


@method_config("ranpac", module="norga.methods.ranpac")
@dataclass
class RanPACConfig(MethodConfig):
    """RanPAC: frozen features through a fixed random projection and ReLU, then a ridge classifier from the
    incrementally summed Gram matrix (no training, no task id, no replay).

    McDonnell et al., "RanPAC: Random Projections and Pre-trained Models for Continual Learning" (NeurIPS 2023);
    the variant without first-session adaptation (the paper's "RP + ridge, no PETL" row), docs/methods/ranpac.md.
    """

    name: str = _f("ranpac")
    projection_dim: int = _f(10000, ge=1)  # M, columns of the Gaussian projection W (D x M); official/paper: 10000
    activation: str = _f("relu", choices=("relu", "identity"))  # after the projection; official: relu
    # candidate ridge values lambda; official: 10.0 ** np.arange(-8, 9), i.e. 1e-8 ... 1e8
    ridges: List[float] = _f([10.0 ** e for e in range(-8, 9)])
    # share of the current task's (shuffled) training samples held out to choose lambda; official: the last 20%
    val_fraction: float = _f(0.2, gt=0.0)

    def __post_init__(self):
        if not self.ridges or any(float(r) <= 0 for r in self.ridges):
            raise ConfigError(f"method.ridges={self.ridges}: needs at least one value and every value > 0; "
                              "official: [1e-8, 1e-7, ..., 1e8]")
        if not 0.0 < float(self.val_fraction) < 1.0:
            raise ConfigError(f"method.val_fraction={self.val_fraction}: must lie strictly between 0 and 1 "
                              "(a part of the task's samples fits, the rest chooses lambda); official: 0.2")
