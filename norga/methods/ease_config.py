"""Config section of the ``ease`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import ConfigError, _f, method_config
from .adapter_config import AdapterTuningConfig


@method_config("ease", module="norga.methods.ease")
@dataclass
class EASEConfig(AdapterTuningConfig):
    """EASE: a new set of bottleneck adapters (a subspace) per task, older ones frozen; a prototype classifier over
    the concatenated subspaces, with old classes' prototypes in newer subspaces synthesised from class similarity.

    Zhou, Sun, Ye, Zhan, "Expandable Subspace Ensemble for Pre-Trained Model-Based Class-Incremental Learning"
    (CVPR 2024). Defaults: LAMDA-CL/LAMDA-PILOT at 5240714 (``exps/ease.json``, ``models/ease.py``,
    ``backbone/vit_ease.py``, ``EaseCosineLinear``); docs/methods/ease.md lists every source and difference.
    """

    name: str = _f("ease")
    adapter_layers: Optional[List[int]] = _f(None)  # blocks that get adapters; null: every block (official)
    epochs: int = _f(20, ge=1)  # per task; official init_epochs = later_epochs: 20
    lr: float = _f(0.025, gt=0.0)  # SGD; official init_lr = later_lr: 0.025 (ImageNet-R: 0.05)
    # true: after task t every old task's prototypes in every later subspace d are synthesised again from the
    # classes of tasks d..t (official recalc_sim: true, solve_sim_reset); false: only the newest subspace is
    # filled, from task t's classes, and earlier syntheses are kept (official solve_similarity)
    recalc_similarity: bool = _f(True)
    # donors: the softmax of the complement's similarities runs over the donor classes, so each old class's weights
    # sum to 1 (official solve_similarity, softmax dim=1); old_classes: over the old classes (the paper's eq. 8)
    complement_softmax: str = _f("donors", choices=("donors", "old_classes"))
    # true: per-subspace cosines, a class's own task's subspace weighted 1 and every other one alpha / t (official
    # use_reweight: true, forward_reweight); false: one cosine of the whole concatenated vectors
    reweight: bool = _f(True)
    alpha: float = _f(0.1, ge=0.0)  # weight of the other subspaces (reweight: true); official alpha: 0.1
    # true: alpha is divided by t, the number of other subspaces after task t (the official code); false: alpha alone
    alpha_over_tasks: bool = _f(True)

    def __post_init__(self):
        super().__post_init__()
        if self.adapter_layers is not None and not self.adapter_layers:
            raise ConfigError("method.adapter_layers=[]: give at least one block, or null for every block")
