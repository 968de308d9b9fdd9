"""Config section of the ``simplecil`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import MethodConfig, _f, method_config


@method_config("simplecil", module="norga.methods.simplecil")
@dataclass
class SimpleCILConfig(MethodConfig):
    """SimpleCIL: class means of frozen features, nearest prototype by cosine (no training, no task id).

    Zhou et al., "Revisiting Class-Incremental Learning with Pre-Trained Models" (2023). A reference that any
    prompt method has to beat with the same backbone and data.
    """

    name: str = _f("simplecil")
    metric: str = _f("cosine", choices=("cosine", "euclidean"))  # similarity of a test feature to each class mean
