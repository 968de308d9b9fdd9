"""Backbones, prefix attention, gates, prompt inputs and prompt pools."""
from ..gates.modules import ACTIVATIONS, GATES, Gate, build_gate, register_gate
from .prefix_attention import PrefixAttention, explicit_prefix_attention, fast_prefix_attention
from .prompt_inputs import POOLS, PromptInput
from .prompted_vit import DEFAULT_PROMPT_LAYERS, PromptedViT
from .prompts import PromptPool

__all__ = [
    "ACTIVATIONS", "GATES", "Gate", "build_gate", "register_gate", "PrefixAttention",
    "explicit_prefix_attention", "fast_prefix_attention", "DEFAULT_PROMPT_LAYERS", "PromptedViT",
    "PromptPool", "POOLS", "PromptInput",
]
