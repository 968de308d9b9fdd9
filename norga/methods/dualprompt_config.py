"""Config section of the ``dualprompt`` method: DualPrompt with a prefix gate (torch-free).

Wang et al., "DualPrompt: Complementary Prompting for Rehearsal-free Continual Learning" (ECCV 2022).
Defaults are the Split CIFAR-100 setting of JH-LEE-KR/dualprompt-pytorch (``configs/cifar100_dualprompt.py``,
the same values as google-research/l2p's JAX ``configs/cifar100_dualprompt.py``); README "Methods" lists the
ImageNet-R values, the NoRGa authors' settings and every difference from the official code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

from ..config import ConfigError, MethodConfig, _f, method_config
from ..gates.schema import gate_section


@method_config("dualprompt", module="norga.methods.dualprompt")
@dataclass
class DualPromptConfig(MethodConfig):
    """DualPrompt: a shared G-prompt and per-task E-prompts (prefixes through a gate), E chosen per sample by key."""

    name: str = _f("dualprompt")
    g_prompt_layers: List[int] = _f([0, 1])  # G-prompt (shared by all tasks): prefixes on these blocks
    g_prompt_length: int = _f(5, ge=0)  # L_g prefix keys and L_g prefix values per block (0: no G-prompt)
    e_prompt_layers: List[int] = _f([2, 3, 4])  # E-prompts (one per task, with a key): prefixes on these blocks
    e_prompt_length: int = _f(5, ge=1)  # L_e keys and L_e values per block (official: 5 CIFAR, 20 ImageNet-R)
    # the prefix gate of every prompted block: linear = DualPrompt; norga = NoRGa's gate on DualPrompt's prefixes
    gate: Dict[str, Any] = _f({"name": "linear"})
    pull_coeff: float = _f(1.0, ge=0.0)  # total = CE - pull_coeff * mean cos(query, key of the task's E-prompt)
    # previous: task t's E-prompt starts as a copy of task t-1's (official shared_prompt_pool); uniform: U(-1, 1)
    e_prompt_init: str = _f("previous", choices=("previous", "uniform"))
    epochs: int = _f(5, ge=0)  # training epochs per task
    lr: float = _f(0.03, gt=0.0)  # x batch / 256 when scale_lr_by_batch (official: 0.03 x 24 / 256)
    batch_size: int = _f(24, ge=1)  # training batch
    scale_lr_by_batch: bool = _f(True)  # lr x batch/256 (official)
    grad_clip: float = _f(1.0, gt=0.0)  # max gradient norm (official 1.0)
    # classifier init: trunc_normal(0.02), bias 0, or PyTorch's default
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))

    def __post_init__(self):
        self.gate = gate_section(self.gate, "linear")
        both = sorted(set(self.g_prompt_layers) & set(self.e_prompt_layers))
        if both:
            raise ConfigError(f"method.g_prompt_layers and method.e_prompt_layers share blocks {both}; a block gets "
                              "either the G-prompt or the E-prompt (official: G on [0, 1], E on [2, 3, 4])")
        if not self.e_prompt_layers:
            raise ConfigError("method.e_prompt_layers is empty; DualPrompt needs at least one E-prompt block")
