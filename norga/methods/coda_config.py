"""Config section of the ``coda`` method: CODA-Prompt with a prefix gate (torch-free).

Smith et al., "CODA-Prompt: COntinual Decomposed Attention-based Prompting for Rehearsal-Free Continual
Learning" (CVPR 2023). Defaults are the Split CIFAR-100 setting of the official code GT-RIPL/CODA-Prompt
(``configs/cifar-100_prompt.yaml``, ``experiments/cifar-100.sh``: ``--prompt_param 100 8 0.0``); README
"Methods" lists the ImageNet-R values and every difference from the official code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config
from ..gates.schema import gate_section


@method_config("coda", module="norga.methods.coda")
@dataclass
class CODAConfig(MethodConfig):
    """CODA-Prompt: prefixes as cos(q*A, K)-weighted sums of a growing, orthogonally drawn component pool."""

    name: str = _f("coda")
    prompt_layers: List[int] = _f([0, 1, 2, 3, 4])  # official e_layers
    pool_size: int = _f(100, ge=1)  # M components per block; task t owns components [t M/T, (t+1) M/T)
    prompt_length: int = _f(8, ge=2)  # L (even): the weighted sum's first L/2 rows are prefix keys, the rest values
    ortho_mu: float = _f(0.0, ge=0.0)  # orthogonality penalty coefficient (official scripts: 0.0)
    # gram_schmidt: each task's new components, keys and attention vectors are drawn orthonormal to all earlier
    # ones (official code); orthogonal: all M drawn orthogonal once at the start (the paper, the first release)
    init: str = _f("gram_schmidt", choices=("gram_schmidt", "orthogonal"))
    # the prefix gate of every prompted block: linear = CODA-Prompt; norga = NoRGa's gate on CODA's prefixes
    gate: Dict[str, Any] = _f({"name": "linear"})
    epochs: int = _f(20, ge=0)  # official CIFAR-100: 20; ImageNet-R: 50
    lr: float = _f(0.001, gt=0.0)  # official: Adam 1e-3, no batch scaling
    batch_size: int = _f(128, ge=1)  # official: 128
    # official: cos(0.99 (pi/2) e / (E - 1)) per epoch; cosine: to 0 over the epochs; constant
    schedule: str = _f("coda_cosine", choices=("coda_cosine", "cosine", "constant"))
    grad_clip: Optional[float] = _f(None, gt=0.0)  # official: none
    head_init: str = _f("pytorch", choices=("trunc_normal", "pytorch"))  # official: nn.Linear's default

    def __post_init__(self):
        self.gate = gate_section(self.gate, "linear")
        if self.prompt_length % 2:
            raise ConfigError(f"method.prompt_length={self.prompt_length} must be even (L/2 prefix keys and L/2 "
                              "prefix values per block); official: 8")
