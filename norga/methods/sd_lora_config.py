"""Config section of the ``sd_lora`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config

# SD-LoRA-RR's ranks per task in the official code (models/sdlora.py, update_network, commented out there):
# 10 for tasks 0-3, 8 for tasks 4-7, 6 from task 8 on
OFFICIAL_RR_RANKS = [10, 10, 10, 10, 8, 8, 8, 8, 6, 6]


@method_config("sd_lora", module="norga.methods.sd_lora")
@dataclass
class SDLoRAConfig(MethodConfig):
    """SD-LoRA: per task a new LoRA component on the query and value projections; once its task is over its
    direction (B A normalised) is frozen while its magnitude, one learnable scalar, keeps training with every
    later task. One head over all classes.

    Wu et al., "SD-LoRA: Scalable Decoupled Low-Rank Adaptation for Class Incremental Learning" (ICLR 2025);
    official code WuYichen-97/SD-Lora-CL (backbone/lora.py, models/sdlora.py, exps/sdlora_*.json).
    docs/methods/sd_lora.md lists where the paper and the code differ and which one each option follows.
    """

    name: str = _f("sd_lora")
    lora_layers: Optional[List[int]] = _f(None)  # blocks whose qkv gets components; null: every block (official)
    rank: int = _f(10, ge=1)  # r of every task's component; official update_network: rank = 10
    # rank of task t's component (SD-LoRA-RR); null: `rank` for every task. Official RR schedule (commented out in
    # models/sdlora.py): [10, 10, 10, 10, 8, 8, 8, 8, 6, 6]; tasks beyond the list use its last value
    task_ranks: Optional[List[int]] = _f(None)
    magnitude_init: float = _f(0.8)  # every magnitude starts at 0.8 (official ParameterWrapper(0.8))
    # reset: every magnitude back to magnitude_init when a task starts (official: the LoRA model is rebuilt per
    # task; Algorithm 1 of the paper also initialises them per task); carry: old magnitudes continue from their
    # learned values (neither side's; docs/methods/sd_lora.md)
    magnitudes: str = _f("reset", choices=("reset", "carry"))
    # the norm dividing an old component: factors = ||B||_F ||A||_F (official), product = ||B A||_F (paper)
    normalise: str = _f("factors", choices=("factors", "product"))
    epochs: int = _f(20, ge=0)  # official exps/sdlora_c100.json and sdlora_inr.json: 20
    # sgd: SGD with `momentum` (official _train); adam: Adam, betas (0.9, 0.999) (the paper, section 4.1)
    optimizer: str = _f("sgd", choices=("sgd", "adam"))
    lr: float = _f(8e-3, gt=0.0)  # constant; official: 8e-3 (CIFAR-100), 1e-2 (ImageNet-R); paper: Adam at 0.008
    # official _train: SGD without weight decay; when set, it also decays the rows of earlier tasks' classes
    weight_decay: float = _f(0.0, ge=0.0)
    momentum: float = _f(0.9, ge=0.0, le=1.0)  # SGD's momentum (unused by adam); official: 0.9
    batch_size: int = _f(128, ge=1)  # official: 128
    grad_clip: Optional[float] = _f(None, gt=0.0)  # max gradient norm (null: off; official: none)

    def __post_init__(self):
        if self.task_ranks is not None and (not self.task_ranks or any(int(r) < 1 for r in self.task_ranks)):
            raise ConfigError(f"method.task_ranks={self.task_ranks}: give one rank >= 1 per task (or null for "
                              f"method.rank on every task); official SD-LoRA-RR: {OFFICIAL_RR_RANKS}")
