"""Config section of the ``inflora`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config, stepping_field


@method_config("inflora", module="norga.methods.inflora")
@dataclass
class InfLoRAConfig(MethodConfig):
    """InfLoRA: per task a new LoRA branch on the key and value projections of every adapted block, whose
    down-projection A is designed before training outside the stored subspace of old tasks and then fixed;
    only the up-projection B (and the task's classifier slice) trains. After the task, the subspace memory is
    updated DualGPM-style.

    Liang & Li, "InfLoRA: Interference-Free Low-Rank Adaptation for Continual Learning" (CVPR 2024); official
    code liangyanshuo/InfLoRA (methods/inflora.py, models/vit_inflora.py, configs/*.json). docs/methods/inflora.md
    lists where the paper and the code differ and which one each option follows.
    """

    name: str = _f("inflora")
    lora_layers: Optional[List[int]] = _f(None)  # blocks whose qkv gets branches; null: every block (official: all 12)
    rank: int = _f(10, ge=1)  # r of every task's branch; official configs cifar100/mimg*_inflora.json: 10
    # A = U_r^T * down_scale (U_r: the top-r left singular vectors); official methods/inflora.py: 1 / sqrt(3)
    down_scale: float = _f(0.5773502691896258, gt=0.0)
    # covariance: A from the SVD of the projected representation matrix P H H^T / n (official methods/inflora.py);
    # inputs: from the SVD of the projected inputs P H (the paper, eq. 6-8); equal at task 0
    design: str = _f("covariance", choices=("covariance", "inputs"))
    # energy threshold of the subspace memory at task 0; grows linearly to threshold_end over the tasks:
    # eps_t = (threshold_end - threshold) * t / T + threshold (official update_DualGPM, lamb / lame);
    # official: 0.95 (cifar100_inflora.json), 0.98 (mimg*_inflora.json)
    threshold: float = _f(0.95, gt=0.0, le=1.0)
    threshold_end: float = _f(1.0, gt=0.0, le=1.0)  # official "lame": 1.0 in every config
    epochs: int = _f(20, ge=0)  # official: 20 (cifar100), 50 (ImageNet-R) epochs per task
    lr: float = _f(5e-4, gt=0.0)  # Adam (betas 0.9 / 0.999); official: 0.0005 in every InfLoRA config
    # official: 0.0. Applies to B and the whole head (the official per-task heads decay only the task's slice)
    weight_decay: float = _f(0.0, ge=0.0)
    batch_size: int = _f(128, ge=1)  # official: 128
    # coda_cosine: the official CosineSchedule, lr * cos(0.99 (pi / 2) e / (E - 1)) per epoch; constant: no decay
    schedule: str = _f("coda_cosine", choices=("coda_cosine", "constant", "cosine"))
    # timm: epoch e trains at the schedule's value of e - 1 (epochs 0 and 1 at lr), as the official CosineSchedule
    # does (its constructor leaves last_epoch at -1, so the first step() after epoch 0 sets f(0) again); torch: at
    # that of e (norga before this option: one epoch ahead of the official lr); docs/crosscheck.md
    schedule_stepping: str = stepping_field("timm")
    grad_clip: Optional[float] = _f(None, gt=0.0)  # max gradient norm (null: off; official: none)

    def __post_init__(self):
        if float(self.threshold_end) < float(self.threshold):
            raise ConfigError(f"method.threshold_end={self.threshold_end} is below method.threshold="
                              f"{self.threshold}: the memory threshold may only grow over the tasks; official: "
                              "threshold 0.95 (CIFAR-100) or 0.98 (ImageNet-R), threshold_end 1.0")
