"""Run a timm VisionTransformer block by block with prompts passed as arguments.

Nothing here copies timm code: the functions call timm's own modules in the
order of ``VisionTransformer.forward_features`` (``patch_embed``,
``_pos_embed``, ``patch_drop``, ``norm_pre``, ``blocks``, ``norm``) and, for a
prompted block, the submodules of timm's ``Block`` (``norm1``, ``attn``,
``ls1``, ``drop_path1``, ``norm2``, ``mlp``, ``ls2``, ``drop_path2``) in the
order of ``Block.forward``, handing the block's prefix to its
:class:`~norga.models.prefix_attention.PrefixAttention` as an argument. No
module state is set around a call, so ``vit.set_grad_checkpointing(True)``
works: each block runs under ``torch.utils.checkpoint`` with its prefix as a
checkpoint input, and the recomputation sees the same prefix.

Shapes: images (B, 3, H, W); tokens (B, N, D) with N = prefix tokens (class
token, registers) + patches; prefix keys/values (B, H, L_i, Dh); prompt
tokens (B, L_p, D).
"""
from __future__ import annotations

from functools import partial
from typing import Mapping, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

try:  # timm picks reentrant or not for its own checkpoint_seq; follow it
    from timm.layers import use_reentrant_ckpt
except ImportError:  # pragma: no cover - older timm 1.0.x
    def use_reentrant_ckpt() -> bool:
        return False

VIT_PARTS = ("patch_embed", "_pos_embed", "patch_drop", "norm_pre", "blocks", "norm", "forward_head",
             "num_prefix_tokens")
BLOCK_PARTS = ("norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2")


def check_runnable_vit(vit: nn.Module) -> None:
    """TypeError unless ``vit`` has the parts of a timm ``VisionTransformer`` we run."""
    missing = [name for name in VIT_PARTS if not hasattr(vit, name)]
    if missing:
        raise TypeError(f"expected a timm VisionTransformer, got {type(vit).__name__} (missing: {missing})")


def check_prompted_block(block: nn.Module, index: int) -> None:
    """A prompted block must be timm's pre-norm ``Block`` (its forward is re-run here from its parts)."""
    from timm.models.vision_transformer import Block

    if not isinstance(block, Block) or type(block).forward is not Block.forward:
        raise TypeError(
            f"block {index} is a {type(block).__name__}; prompted blocks must be timm's standard "
            "vision_transformer.Block (pre-norm), as in vit_*, deit_* and dinov2 models"
        )
    missing = [name for name in BLOCK_PARTS if not hasattr(block, name)]
    if missing:
        raise TypeError(f"block {index} lacks {missing}; cannot run it with a prefix")


def embed(vit: nn.Module, images: Tensor) -> Tensor:
    """Images (B, 3, H, W) -> block-0 input tokens (B, N, D), exactly as timm's forward_features."""
    x = vit.patch_embed(images)
    x = vit._pos_embed(x)
    x = vit.patch_drop(x)
    return vit.norm_pre(x)


def prompted_block_forward(block: nn.Module, x: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """timm ``Block.forward`` on (B, N, D) with prefix keys/values (B, H, L, Dh) for its attention."""
    x = x + block.drop_path1(block.ls1(block.attn(block.norm1(x), prefix=(keys, values))))
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return x


def insert_tokens(x: Tensor, tokens: Tensor, num_prefix_tokens: int) -> Tensor:
    """(B, N, D) + prompt tokens (B, L_p, D) -> (B, N + L_p, D) as [prefix tokens, prompt tokens, rest]."""
    tokens = tokens.to(x.dtype)
    return torch.cat([x[:, :num_prefix_tokens], tokens, x[:, num_prefix_tokens:]], dim=1)


def remove_tokens(x: Tensor, num_tokens: int, num_prefix_tokens: int) -> Tensor:
    """Inverse of :func:`insert_tokens` on (B, N + L_p, D) -> (B, N, D)."""
    if num_tokens == 0:
        return x
    return torch.cat([x[:, :num_prefix_tokens], x[:, num_prefix_tokens + num_tokens:]], dim=1)


def run_block(block: nn.Module, x: Tensor, prefix: Optional[Tuple[Tensor, Tensor]], use_checkpoint: bool) -> Tensor:
    """One block, with its prefix (keys, values) or None, optionally under gradient checkpointing."""
    if prefix is None:
        fn, args = block, (x,)
    else:
        fn, args = partial(prompted_block_forward, block), (x, *prefix)
    if use_checkpoint:
        return checkpoint(fn, *args, use_reentrant=use_reentrant_ckpt())
    return fn(*args)


def run_blocks(
    vit: nn.Module,
    x: Tensor,
    prefixes: Mapping[int, Tuple[Tensor, Tensor]],
    tokens: Optional[Tensor] = None,
    token_block: int = 0,
) -> Tensor:
    """Block input (B, N, D) -> last block's output (B, N + L_p, D), before the final norm.

    ``prefixes``: block index -> (keys, values), each (B, H, L_i, Dh);
    ``tokens``: (B, L_p, D) inserted at the input of ``token_block``.
    Honours ``vit.grad_checkpointing`` (one checkpoint per block, as timm).
    """
    use_checkpoint = bool(getattr(vit, "grad_checkpointing", False)) and not torch.jit.is_scripting()
    for i, block in enumerate(vit.blocks):
        if tokens is not None and i == token_block:
            x = insert_tokens(x, tokens, vit.num_prefix_tokens)
        x = run_block(block, x, prefixes.get(i), use_checkpoint)
    return x


def pool(vit: nn.Module, features: Tensor, num_tokens: int = 0, how: str = "token") -> Tensor:
    """Token features (B, N + L_p, D) after the final norm -> pre-logits features (B, D).

    ``how="token"``: timm's ``forward_head(pre_logits=True)`` on the sequence
    without the L_p prompt tokens (class token for standard ViTs).
    ``how="prompt_mean"``: mean of the prompt tokens' outputs, then timm's
    ``fc_norm`` and ``head_drop``.
    """
    start = vit.num_prefix_tokens
    if how == "prompt_mean":
        x = features[:, start:start + num_tokens].mean(dim=1)
        return vit.head_drop(vit.fc_norm(x))
    return vit.forward_head(remove_tokens(features, num_tokens, start), pre_logits=True)
