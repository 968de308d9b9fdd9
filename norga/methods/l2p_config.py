"""Config section of the ``l2p`` method: Learning to Prompt (torch-free; read before torch loads).

Wang et al., "Learning to Prompt for Continual Learning" (CVPR 2022). Defaults are the paper's
CIFAR-100 setting as the PyTorch port JH-LEE-KR/l2p-pytorch runs it (the official JAX code
google-research/l2p at its first release has the same values); README "Methods" lists where
the official JAX code at its latest commit and the NoRGa authors' L2P differ.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, MethodConfig, _f, method_config


@method_config("l2p", module="norga.methods.l2p")
@dataclass
class L2PConfig(MethodConfig):
    """L2P: a shared pool of token prompts with keys, top-N chosen per sample by cosine to the frozen class token."""

    name: str = _f("l2p")
    pool_size: int = _f(10, ge=1)  # M prompts with M keys, shared by all tasks
    prompt_length: int = _f(5, ge=1)  # L tokens per prompt
    top_k: int = _f(5, ge=1)  # N prompts per sample: N * L tokens prepended after the class token at block 0
    # cls: every prompt token gets the class token's position embedding (l2p-pytorch); none: no position
    # embedding on prompts (JAX code at its latest commit, NoRGa authors' code)
    prompt_pos_embed: str = _f("cls", choices=("cls", "none"))
    # prompt_mean: the head reads the mean of the prompt tokens' outputs (paper); token: the class token
    head_pool: str = _f("prompt_mean", choices=("prompt_mean", "token"))
    pull_coeff: float = _f(0.1, ge=0.0)  # surrogate loss: total = CE - pull_coeff * (sum of selected cos) / B
    init: str = _f("uniform", choices=("uniform",))  # prompts and keys ~ U(-1, 1) (l2p-pytorch)
    epochs: int = _f(5, ge=0)  # training epochs per task
    lr: float = _f(0.03, gt=0.0)  # x batch / 256 when scale_lr_by_batch (l2p-pytorch: 0.03 x 16 / 256)
    batch_size: int = _f(16, ge=1)  # training batch
    scale_lr_by_batch: bool = _f(True)  # lr x batch/256 (official)
    grad_clip: float = _f(1.0, gt=0.0)  # max gradient norm (official 1.0)
    # classifier init: trunc_normal(0.02), bias 0, or PyTorch's default
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))

    def __post_init__(self):
        if self.top_k > self.pool_size:
            raise ConfigError(f"method.top_k={self.top_k} exceeds method.pool_size={self.pool_size}; "
                              "choose top_k <= pool_size")
