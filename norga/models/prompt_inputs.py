"""Prompts as forward arguments: per-block prefixes and prepended prompt tokens.

A prompted forward of :class:`norga.models.PromptedViT` takes a
:class:`PromptInput` (or, for backwards compatibility, one stacked prefix
tensor). Units: H heads, Dh head dim, D token width (``embed_dim``), B batch.

* ``prefixes`` — block index -> ``(keys, values)``, each (B or 1, H, L_i, Dh).
  Prefix tuning (HiDe-Prompt, NoRGa, DualPrompt): the L_i keys/values are
  appended to that block's attention keys/values, in each head's key/value
  space (not projected through the block's ``qkv``). Every block has its own
  length L_i (DualPrompt: G-prompts of one length on blocks 0-1, E-prompts of
  another on blocks 2-4). L_i = 0 means "no prefix on this block".
* ``tokens`` — (B or 1, L_p, D) prompt tokens prepended to the token sequence
  at the input of block ``token_block`` (prompt tuning; L2P: block 0). They
  are inserted right after the backbone's prefix tokens (class token and any
  register tokens), *after* the position embedding (they get none), so the
  sequence entering that block and every later one is
  ``[cls, registers..., prompt tokens (L_p), patches]`` and the class token
  stays at index 0.
* ``pool`` — how :meth:`PromptedViT.forward` reads the (B, D) feature:
  ``"token"`` (default): timm's own pooling (``forward_head(pre_logits=True)``;
  the class token for the standard ViTs) over the sequence *without* the
  prompt tokens; ``"prompt_mean"``: the mean of the L_p prompt tokens'
  outputs (after the final norm), then timm's ``fc_norm`` and ``head_drop``
  (both identities for class-token ViTs) — L2P's choice.

A batch dim of 1 is broadcast to the whole batch; a batch dim of B gives
sample b only its own prompts (nothing mixes across the batch).

Where the L2P code puts its prompt tokens (facts, for reference):
google-research/l2p (JAX, ``models/vit.py``) adds the position embedding to
``[cls, patches]`` and then prepends the prompts at the input of the prompted
layer (``[prompts, cls, patches]``, no position embedding on prompts), reading
the class token at index ``total_prompt_len``; JH-LEE-KR/l2p-pytorch builds
``[cls, prompts, patches]`` before the position embedding and gives every
prompt token the class token's position embedding. Without attention masks a
ViT is permutation-equivariant, so the order only moves outputs; the
l2p-pytorch variant equals ours with ``tokens + vit.pos_embed[:, :1]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, NamedTuple, Optional, Sequence, Tuple

from torch import Tensor

POOLS = ("token", "prompt_mean")

KeyValue = Tuple[Tensor, Tensor]


@dataclass(frozen=True, eq=False)
class PromptInput:
    """Prompts of one forward call (see the module docstring for shapes).

    Args:
        prefixes: block index -> (keys, values), each (B or 1, H, L_i, Dh).
        tokens: prompt tokens (B or 1, L_p, D), or None.
        token_block: index of the block whose input gets the prompt tokens.
        pool: ``"token"`` (timm pooling, class token) or ``"prompt_mean"``.
    """

    prefixes: Mapping[int, KeyValue] = field(default_factory=dict)
    tokens: Optional[Tensor] = None
    token_block: int = 0
    pool: str = "token"

    def __post_init__(self):
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool {self.pool!r}; choose one of {POOLS}")

    @property
    def num_tokens(self) -> int:
        """L_p, the number of prepended prompt tokens (0 without tokens)."""
        return 0 if self.tokens is None else int(self.tokens.shape[-2])

    @classmethod
    def from_stacked(cls, prefix: Tensor, prompt_layers: Sequence[int], **options) -> "PromptInput":
        """One length for all blocks: (B, P, 2, L, H, Dh) or (P, 2, L, H, Dh) -> per-block prefixes.

        Block ``prompt_layers[j]`` gets keys ``prefix[:, j, 0]`` and values
        ``prefix[:, j, 1]``, each transposed to (B or 1, H, L, Dh).
        """
        if prefix.dim() == 5:
            prefix = prefix.unsqueeze(0)
        if prefix.dim() != 6 or prefix.shape[1] != len(prompt_layers) or prefix.shape[2] != 2:
            raise ValueError(
                f"stacked prefix must have shape (B, P={len(prompt_layers)}, 2, L, H, Dh), got {tuple(prefix.shape)}"
            )
        per_layer = prefix.permute(1, 2, 0, 4, 3, 5)  # (P, 2, B, H, L, Dh)
        return cls(prefixes={int(i): (kv[0], kv[1]) for i, kv in zip(prompt_layers, per_layer)}, **options)


class PromptSpec(NamedTuple):
    """What a backbone accepts: prompted block indices, depth and widths."""

    prompt_layers: Tuple[int, ...]
    depth: int
    num_heads: int
    head_dim: int
    embed_dim: int


def split_stacked_prefix(prefix: Optional[Tensor], batch: int, spec: PromptSpec) -> PromptInput:
    """The original stacked layout (B, P, 2, L, H, Dh) or (P, 2, L, H, Dh) -> a resolved PromptInput.

    Kept operation for operation as before per-block prompts existed, so the
    old call gives bit-identical outputs. L = 0 means no prefix.
    """
    P = len(spec.prompt_layers)
    expected = f"(B={batch}, P={P}, 2, L, H={spec.num_heads}, Dh={spec.head_dim})"
    if prefix is None:
        return PromptInput()
    if prefix.dim() not in (5, 6):
        raise ValueError(f"prefix must have shape {expected}, got {tuple(prefix.shape)}")
    if prefix.dim() == 5:
        prefix = prefix.unsqueeze(0).expand(batch, *prefix.shape)
    if tuple(prefix.shape[:3]) != (batch, P, 2) or tuple(prefix.shape[4:]) != (spec.num_heads, spec.head_dim):
        raise ValueError(f"prefix must have shape {expected}, got {tuple(prefix.shape)}")
    if prefix.shape[3] == 0:
        return PromptInput()
    # (B, P, 2, L, H, Dh) -> (P, 2, B, H, L, Dh): batch stays aligned with its own keys/values
    per_layer = prefix.permute(1, 2, 0, 4, 3, 5)
    return PromptInput(prefixes={i: (layer[0], layer[1]) for i, layer in zip(spec.prompt_layers, per_layer)})


def resolve_prompt_input(prompts: PromptInput, batch: int, spec: PromptSpec) -> PromptInput:
    """Validate shapes, broadcast batch dims of 1 to ``batch`` and drop empty prompts."""
    prefixes = {}
    for block, kv in prompts.prefixes.items():
        resolved = _resolve_prefix(int(block), kv, batch, spec)
        if resolved is not None:
            prefixes[int(block)] = resolved
    tokens = _resolve_tokens(prompts, batch, spec)
    if prompts.pool == "prompt_mean" and tokens is None:
        raise ValueError("pool 'prompt_mean' needs prompt tokens (B or 1, L_p >= 1, D); got none")
    return replace(prompts, prefixes=prefixes, tokens=tokens)


def _resolve_prefix(block: int, kv, batch: int, spec: PromptSpec) -> Optional[KeyValue]:
    if block not in spec.prompt_layers:
        raise ValueError(
            f"prefix given for block {block}, but only blocks {list(spec.prompt_layers)} have prefix attention "
            "(PromptedViT prompt_layers)"
        )
    expected = (
        f"prefix for block {block} must be (keys, values), each of shape "
        f"(B={batch} or 1, H={spec.num_heads}, L, Dh={spec.head_dim}) with the same L"
    )
    if not isinstance(kv, (tuple, list)) or len(kv) != 2 or not all(isinstance(t, Tensor) for t in kv):
        raise ValueError(f"{expected}; got {type(kv).__name__}")
    keys, values = kv
    ok = keys.dim() == 4 and keys.shape == values.shape and keys.shape[0] in (1, batch) and (
        tuple(keys.shape[1:2]) + tuple(keys.shape[3:]) == (spec.num_heads, spec.head_dim)
    )
    if not ok:
        raise ValueError(f"{expected}; got keys {tuple(keys.shape)}, values {tuple(values.shape)}")
    if keys.shape[2] == 0:
        return None
    if keys.shape[0] != batch:
        keys, values = keys.expand(batch, -1, -1, -1), values.expand(batch, -1, -1, -1)
    return keys, values


def _resolve_tokens(prompts: PromptInput, batch: int, spec: PromptSpec) -> Optional[Tensor]:
    tokens = prompts.tokens
    if tokens is None:
        return None
    if not 0 <= prompts.token_block < spec.depth:
        raise ValueError(f"token_block {prompts.token_block} must be a block index in [0, {spec.depth - 1}]")
    if tokens.dim() != 3 or tokens.shape[0] not in (1, batch) or tokens.shape[2] != spec.embed_dim:
        raise ValueError(
            f"prompt tokens must have shape (B={batch} or 1, L_p, D={spec.embed_dim}), got {tuple(tokens.shape)}"
        )
    if tokens.shape[1] == 0:
        return None
    return tokens.expand(batch, -1, -1) if tokens.shape[0] != batch else tokens


def resolve_prompts(prompts, batch: int, spec: PromptSpec) -> PromptInput:
    """None, a stacked prefix tensor or a PromptInput -> a resolved PromptInput."""
    if prompts is None or isinstance(prompts, Tensor):
        return split_stacked_prefix(prompts, batch, spec)
    if isinstance(prompts, PromptInput):
        return resolve_prompt_input(prompts, batch, spec)
    raise TypeError(
        f"prompts must be None, a stacked prefix tensor (B, P, 2, L, H, Dh) or a PromptInput, "
        f"got {type(prompts).__name__}"
    )
