"""A timm VisionTransformer with per-sample prefix prompts on chosen blocks.

``PromptedViT(vit, prompt_layers=(0, 1, 2, 3, 4), gate="norga", activation="tanh")``
replaces ``vit.blocks[i].attn`` by :class:`PrefixAttention` for the chosen
blocks (reusing the original weights) and runs timm's own
``forward_features`` / ``forward_head`` — only the attention of prompted
blocks sees the prefixes.

Prefix tensor for a batch: (B, P, 2, L, H, Dh), see :mod:`norga.models.prompts`.
A single (P, 2, L, H, Dh) prompt is broadcast to the whole batch.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence

from torch import Tensor, nn

from .gates import build_gate
from .prefix_attention import PrefixAttention

DEFAULT_PROMPT_LAYERS = (0, 1, 2, 3, 4)


class PromptedViT(nn.Module):
    """Frozen-backbone ViT whose prompted blocks take per-sample prefixes.

    Args:
        vit: a timm ``VisionTransformer`` (any size / patch / image size).
        prompt_layers: indices of blocks that receive prefixes.
        gate: gate registry name (``"linear"`` or ``"norga"``).
        path: ``"fast"`` (SDPA) or ``"explicit"`` (reference math).
        **gate_options: e.g. ``activation="tanh"`` for NoRGa.
    """

    def __init__(
        self,
        vit: nn.Module,
        prompt_layers: Sequence[int] = DEFAULT_PROMPT_LAYERS,
        gate: str = "linear",
        path: str = "fast",
        **gate_options,
    ):
        super().__init__()
        blocks = getattr(vit, "blocks", None)
        if blocks is None or not hasattr(vit, "forward_features"):
            raise TypeError(f"expected a timm VisionTransformer, got {type(vit).__name__}")
        depth = len(blocks)
        layers = tuple(int(i) for i in prompt_layers)
        bad = [i for i in layers if not 0 <= i < depth]
        if bad or len(set(layers)) != len(layers):
            raise ValueError(
                f"prompt_layers {list(layers)} must be distinct block indices in [0, {depth - 1}]"
            )
        self.vit = vit
        self.prompt_layers = layers
        self.gate_name = gate
        for i in layers:
            blocks[i].attn = PrefixAttention(blocks[i].attn, build_gate(gate, **gate_options), path)
        first = self.prefix_attentions[0] if layers else None
        self.num_heads = first.num_heads if first else blocks[0].attn.num_heads
        self.head_dim = first.head_dim if first else blocks[0].attn.head_dim
        self.embed_dim = vit.num_features

    @property
    def prefix_attentions(self) -> List[PrefixAttention]:
        return [self.vit.blocks[i].attn for i in self.prompt_layers]

    def prompt_shape(self, length: int) -> tuple:
        """Shape of one task's prompt: (P, 2, L, H, Dh)."""
        return (len(self.prompt_layers), 2, length, self.num_heads, self.head_dim)

    def set_path(self, path: str) -> None:
        for attn in self.prefix_attentions:
            attn.path = path

    # ---- parameters -------------------------------------------------
    def gate_parameters(self) -> Iterator[nn.Parameter]:
        for attn in self.prefix_attentions:
            yield from attn.prefix_gate.parameters()

    def freeze_backbone(self) -> None:
        """Freeze every backbone tensor; gates keep their current trainability."""
        gate_ids = {id(p) for p in self.gate_parameters()}
        for p in self.vit.parameters():
            if id(p) not in gate_ids:
                p.requires_grad_(False)

    def freeze_gates(self) -> None:
        for attn in self.prefix_attentions:
            attn.prefix_gate.freeze()

    def unfreeze_gates(self) -> None:
        for attn in self.prefix_attentions:
            attn.prefix_gate.unfreeze()

    # ---- forward ----------------------------------------------------
    @contextmanager
    def _prefixes(self, x: Tensor, prefix: Optional[Tensor]):
        per_layer = self._split_prefix(prefix, x.shape[0])
        try:
            for attn, kv in zip(self.prefix_attentions, per_layer):
                attn.prefix = kv
            yield
        finally:
            for attn in self.prefix_attentions:
                attn.prefix = None

    def _split_prefix(self, prefix: Optional[Tensor], batch: int) -> list:
        """(B, P, 2, L, H, Dh) -> per layer (keys, values), each (B, H, L, Dh)."""
        P = len(self.prompt_layers)
        if prefix is None or prefix.shape[-4] == 0:
            return [None] * P
        if prefix.dim() == 5:
            prefix = prefix.unsqueeze(0).expand(batch, *prefix.shape)
        expected = f"(B={batch}, P={P}, 2, L, H={self.num_heads}, Dh={self.head_dim})"
        if prefix.dim() != 6 or tuple(prefix.shape[:3]) != (batch, P, 2) or tuple(
            prefix.shape[4:]
        ) != (self.num_heads, self.head_dim):
            raise ValueError(f"prefix must have shape {expected}, got {tuple(prefix.shape)}")
        # (B, P, 2, L, H, Dh) -> (P, 2, B, H, L, Dh): batch stays aligned with its own keys/values
        per_layer = prefix.permute(1, 2, 0, 4, 3, 5)
        return [(layer[0], layer[1]) for layer in per_layer]

    def forward_features(self, x: Tensor, prefix: Optional[Tensor] = None) -> Tensor:
        """Images (B, 3, H, W) -> token features (B, N, D) after timm's final norm."""
        with self._prefixes(x, prefix):
            return self.vit.forward_features(x)

    def forward(self, x: Tensor, prefix: Optional[Tensor] = None) -> Tensor:
        """Images (B, 3, H, W) -> pre-logits features (B, D) (timm pooling, e.g. class token)."""
        return self.vit.forward_head(self.forward_features(x, prefix), pre_logits=True)
