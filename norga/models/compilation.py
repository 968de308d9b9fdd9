"""Optional ``torch.compile`` of the backbone forward (``compile: off | default | reduce-overhead | max-autotune``).

The run sets the mode once (:func:`compile_mode`, by the task loop, like the amp mode);
every :class:`~norga.models.PromptedViT` forward then runs :func:`backbone_tokens` (patch
embedding, timm's blocks with their prefixes and prompt tokens, final norm) through one
``torch.compile``-d function per mode, shared by all models of the process. Prompts, gates
and heads are arguments or ordinary modules, so training and evaluation stay the same code;
the compiled function recompiles when the prompt layout changes (e.g. frozen vs prompted
forwards) and treats the batch size as dynamic after the first change. ``off`` (the default)
runs eagerly.
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from . import blockwise
from .mode_switch import ModeSwitch

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
_COMPILE = ModeSwitch("compile", COMPILE_MODES, "off")
_compiled: Dict[str, Callable] = {}


def backbone_tokens(vit: nn.Module, x: Tensor, prefixes: Mapping[int, Tuple[Tensor, Tensor]],
                    tokens: Optional[Tensor], token_block: int) -> Tensor:
    """Images (B, 3, H, W) -> normed token features (B, N + L_p, D): embed, blocks with prefixes, norm."""
    out = blockwise.embed(vit, x)
    out = blockwise.run_blocks(vit, out, prefixes, tokens, token_block)
    return vit.norm(out)


def compile_mode(mode: str):
    """Run the enclosed code with the backbone compiled in ``mode`` (a context manager; restored afterwards)."""
    return _COMPILE.use(mode)


def backbone_function() -> Callable:
    """:func:`backbone_tokens`, compiled in the current mode (compiled once per mode and process)."""
    mode = _COMPILE.value
    if mode == "off":
        return backbone_tokens
    if mode not in _compiled:
        _compiled[mode] = torch.compile(backbone_tokens, mode=mode)
    return _compiled[mode]
