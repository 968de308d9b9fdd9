"""Prefix-aware multi-head attention that wraps (never forks) timm's ``Attention``.

Shapes (B batch, N tokens, H heads, Dh head dim, L prefix length):

* input ``x``: (B, N, C)
* per-sample prefix keys ``pk`` and values ``pv``: (B, H, L, Dh) each. They
  live directly in each head's key/value space (after ``qkv`` and ``k_norm``),
  so they are *not* projected through the block's weights — as in the
  authors' prefix tuning.
* output: (B, N, C), exactly timm's layout.

The prefix is a call argument, ``attn(x, prefix=(pk, pv))`` (keyword only, so
the positional signature stays timm's ``(x, attn_mask, is_causal)``); without
it the module computes exactly timm's attention. Keys/values with a batch dim
of 1 are broadcast to the batch.

For one head, one query token i, image keys j and prefix keys p, the
attention weights are ``softmax([g(s_ip)]_p ++ [s_ij]_j)`` with scaled scores
``s = q·k * Dh**-0.5`` and ``g`` the layer's gate (identity for plain prefix
tuning, ``s + alpha*act(tau*s)`` for NoRGa; paper eqs. 11-12).

Two numerically equivalent paths:

* **fast** (default): one call to ``F.scaled_dot_product_attention``. The
  gate's additive term ``b_ip = g(s_ip) - s_ip`` (a small (B, H, N, L) tensor)
  is folded in exactly by appending L columns to queries and keys:
  ``q'_i = [q_i, b_i / scale]`` and ``k'_p = [pk_p, e_p]`` (one-hot),
  ``k'_j = [k_j, 0]``, so ``scale * q'·k'`` equals the gated score for prefix
  columns and the plain score for image columns. The full (B, H, N, N+L)
  score tensor is never built in Python. The augmented head dim Dh + L is
  zero-padded to a multiple of 8 (64 + 5 = 69 -> 72), so CUDA's fused SDPA
  kernels (flash, memory-efficient: head dims divisible by 8) can take it;
  the gate's term is computed from fp32 scores also under autocast.
* **explicit**: the textbook formula with the full score matrix, for tests
  and debugging.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..gates.modules import Gate, LinearGate

ATTENTION_PATHS = ("fast", "explicit")


class PrefixAttention(nn.Module):
    """Drop-in replacement for a timm ``Attention`` module with prefix support.

    Reuses the wrapped module's ``qkv``, ``q_norm``, ``k_norm``, ``attn_drop``,
    ``norm``, ``proj``, ``proj_drop`` and ``scale`` (same objects, so state-dict
    keys stay unchanged) and adds ``prefix_gate``.
    """

    def __init__(self, attn: nn.Module, gate: Optional[Gate] = None, path: str = "fast"):
        super().__init__()
        _check_wrappable(attn)
        self.num_heads = attn.num_heads
        self.head_dim = attn.head_dim
        self.attn_dim = getattr(attn, "attn_dim", attn.num_heads * attn.head_dim)
        self.scale = attn.scale
        self.qkv = attn.qkv
        self.q_norm = attn.q_norm
        self.k_norm = attn.k_norm
        self.attn_drop = attn.attn_drop
        self.norm = getattr(attn, "norm", nn.Identity())
        self.gate = getattr(attn, "gate", None)  # timm's optional output gate (not ours)
        self.proj = attn.proj
        self.proj_drop = attn.proj_drop
        self.prefix_gate = gate if gate is not None else LinearGate()
        self.path = path

    @property
    def path(self) -> str:
        return self._path

    @path.setter
    def path(self, value: str) -> None:
        if value not in ATTENTION_PATHS:
            raise ValueError(f"unknown attention path {value!r}; choose one of {ATTENTION_PATHS}")
        self._path = value

    def forward(
        self, x: Tensor, attn_mask: Optional[Tensor] = None, is_causal: bool = False, *,
        prefix: Optional[Tuple[Tensor, Tensor]] = None,
    ) -> Tensor:
        """x (B, N, C), optional prefix (keys, values) each (B or 1, H, L, Dh) -> (B, N, C)."""
        B, N, _ = x.shape
        out_gate = self.gate(x).sigmoid() if self.gate is not None else None
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        dropout_p = self.attn_drop.p if self.training else 0.0
        if prefix is None:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
            )
        else:
            if attn_mask is not None or is_causal:
                raise NotImplementedError(
                    "prefix attention does not support attn_mask/is_causal; call without them"
                )
            pk, pv = self._check_prefix(prefix, q)
            if self.path == "fast":
                x = fast_prefix_attention(q, k, v, pk, pv, self.prefix_gate, self.scale, dropout_p)
            else:
                x = explicit_prefix_attention(q, k, v, pk, pv, self.prefix_gate, self.scale, self.attn_drop)
        x = x.transpose(1, 2).reshape(B, N, self.attn_dim)
        x = self.norm(x)
        if out_gate is not None:
            x = x * out_gate
        return self.proj_drop(self.proj(x))

    def _check_prefix(self, prefix: Tuple[Tensor, Tensor], q: Tensor) -> Tuple[Tensor, Tensor]:
        """Validate (keys, values) against q (B, H, N, Dh); broadcast a batch dim of 1 to B."""
        pk, pv = prefix
        B, H, _, Dh = q.shape
        for name, t in (("keys", pk), ("values", pv)):
            if t.dim() != 4 or t.shape[0] not in (1, B) or t.shape[1] != H or t.shape[3] != Dh:
                raise ValueError(
                    f"prefix {name} must have shape (B={B} or 1, H={H}, L, Dh={Dh}), got {tuple(t.shape)}"
                )
        if pk.shape != pv.shape:
            raise ValueError(f"prefix keys {tuple(pk.shape)} and values {tuple(pv.shape)} differ in shape")
        if pk.shape[0] != B:
            pk, pv = pk.expand(B, -1, -1, -1), pv.expand(B, -1, -1, -1)
        return pk, pv


def fast_prefix_attention(
    q: Tensor, k: Tensor, v: Tensor, pk: Tensor, pv: Tensor, gate: Gate, scale: float, dropout_p: float = 0.0
) -> Tensor:
    """Gated prefix attention through one SDPA call. q, k, v: (B, H, N, Dh); pk, pv: (B, H, L, Dh)."""
    keys = torch.cat([pk.to(k.dtype), k], dim=2)
    values = torch.cat([pv.to(v.dtype), v], dim=2)
    if gate.is_linear:
        return F.scaled_dot_product_attention(q, keys, values, dropout_p=dropout_p, scale=scale)
    B, H, N, Dh = q.shape
    L = pk.shape[2]
    prefix_scores = (q @ keys[:, :, :L].transpose(-2, -1)) * scale  # (B, H, N, L)
    bias = gate.extra(prefix_scores.float())  # the gate in fp32, also under autocast
    pad = padded_head_dim(Dh + L) - (Dh + L)  # zero columns: they add 0 to every q'·k' and are sliced off
    q_aug = torch.cat([q, (bias / scale).to(q.dtype)], dim=-1)  # (B, H, N, Dh + L)
    selector = torch.zeros(B, H, L + N, L, dtype=k.dtype, device=k.device)
    selector[:, :, :L] = torch.eye(L, dtype=k.dtype, device=k.device)
    k_aug = torch.cat([keys, selector], dim=-1)  # (B, H, L + N, Dh + L)
    q_aug, k_aug = F.pad(q_aug, (0, pad)), F.pad(k_aug, (0, pad))  # (..., Dh + L + pad), a multiple of 8
    v_aug = F.pad(values, (0, L + pad))  # equal head dims keep SDPA on its fused kernels
    out = F.scaled_dot_product_attention(q_aug, k_aug, v_aug, dropout_p=dropout_p, scale=scale)
    return out[..., :Dh]


SDPA_HEAD_DIM_MULTIPLE = 8  # CUDA's flash / memory-efficient SDPA kernels need head dims divisible by 8


def padded_head_dim(dim: int, multiple: int = SDPA_HEAD_DIM_MULTIPLE) -> int:
    """The smallest multiple of ``multiple`` >= ``dim`` (e.g. 64 + 5 = 69 -> 72)."""
    return -(-dim // multiple) * multiple


def explicit_prefix_attention(
    q: Tensor, k: Tensor, v: Tensor, pk: Tensor, pv: Tensor, gate: Gate, scale: float,
    attn_drop: Optional[nn.Module] = None,
) -> Tensor:
    """Reference formula (paper eqs. 11-12) with the full (B, H, N, L+N) score matrix."""
    L = pk.shape[2]
    prefix_scores = (q @ pk.to(q.dtype).transpose(-2, -1)) * scale  # (B, H, N, L)
    image_scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, N, N)
    scores = torch.cat([gate(prefix_scores), image_scores], dim=-1)
    weights = scores.softmax(dim=-1)
    if attn_drop is not None:
        weights = attn_drop(weights)
    return weights[..., :L] @ pv.to(v.dtype) + weights[..., L:] @ v


def _check_wrappable(attn: nn.Module) -> None:
    needed = ("qkv", "num_heads", "head_dim", "scale", "q_norm", "k_norm", "attn_drop", "proj", "proj_drop")
    missing = [name for name in needed if not hasattr(attn, name)]
    if missing or not isinstance(attn.qkv, nn.Linear):
        raise TypeError(
            f"cannot wrap {type(attn).__name__}: prefix attention needs a timm "
            f"`Attention` with a fused qkv Linear (missing: {missing or ['qkv Linear']}). "
            "Use a standard timm VisionTransformer (vit_*, deit_*, dinov2 models)."
        )
