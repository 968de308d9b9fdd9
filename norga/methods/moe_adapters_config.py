"""Config sections of the MoE-adapter methods ``lora_moe`` and ``mh_moe`` (torch-free).

"Multi-Head Attention as a Source of Catastrophic Forgetting in MoE Transformers" (MH-MoE; ../shared/papers),
moved from LLMs on TRACE to a frozen ViT: LoRA experts beside every adapted block's MLP, routed per token.
Paper values (Appendix A.3.4): 4 experts per layer, top-1, AdamW (weight decay 0.01, betas 0.9/0.95,
eps 1e-6) with a cosine schedule; LoRA ranks "tuned so that the activated parameters per token are
comparable" — here MH-MoE rank 2 with 8 heads and LoRAMoE rank 9 activate the same number per token
(LoRAMoE: k r (D + D); MH-MoE: H k r (D/H + D); equal when r_L = r_M (H + 1) / 2). The paper's lr (1e-4)
and epochs (2-5) are for LLM fine-tuning; the image defaults here (lr 1e-3, 5 epochs) are ours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import MethodConfig, _f, method_config


@dataclass
class MoEAdapterConfig(MethodConfig):
    """Fields shared by ``lora_moe`` and ``mh_moe`` (not a method by itself)."""

    adapter_layers: Optional[List[int]] = _f(None)  # blocks whose MLP gets an adapter; null: every block
    experts: int = _f(4, ge=1)  # K experts per router (paper: 4)
    top_k: int = _f(1, ge=1)  # experts selected per router (paper: top-1)
    rank: int = _f(9, ge=1)  # LoRA rank r of every expert
    epochs: int = _f(5, ge=0)  # training epochs per task
    lr: float = _f(1e-3, gt=0.0)  # AdamW, cosine to 0 over the epochs (paper's optimiser family)
    weight_decay: float = _f(0.01, ge=0.0)  # paper: 0.01 (betas 0.9 / 0.95, eps 1e-6)
    batch_size: int = _f(32, ge=1)  # training batch
    grad_clip: Optional[float] = _f(1.0, gt=0.0)  # max gradient norm (null: off)
    # aligned: after each task the head is re-trained on Gaussian pseudo-features of every seen class (HiDe's
    # TAP on class statistics of the adapted features); ce: only the cross-entropy of each task (within its
    # classes) trains the head. Both methods use the same protocol in every comparison.
    classifier: str = _f("aligned", choices=("aligned", "ce"))
    align_epochs: int = _f(10, ge=0)  # epochs of the head's alignment on pseudo-features (classifier: aligned)
    align_lr: float = _f(0.01, gt=0.0)  # SGD momentum 0.9, cosine, as TAP
    align_samples_per_class: int = _f(64, ge=2)  # pseudo-features per seen class and alignment epoch
    # per-class Gaussians of the adapted features: full covariance or diagonal
    stats_kind: str = _f("covariance", choices=("covariance", "variance"))


@method_config("lora_moe", module="norga.methods.moe_adapters")
@dataclass
class LoRAMoEConfig(MoEAdapterConfig):
    """LoRAMoE: LoRA experts beside each MLP, one router on the full token state, top-k (paper's baseline)."""

    name: str = _f("lora_moe")


@method_config("mh_moe", module="norga.methods.moe_adapters")
@dataclass
class MHMoEConfig(MoEAdapterConfig):
    """MH-MoE: the token state split into H head-aligned slices, each routed among its own K private experts."""

    name: str = _f("mh_moe")
    heads: int = _f(8, ge=1)  # H slices (must divide the width; paper: 8)
    rank: int = _f(2, ge=1)  # with H = 8: the activated parameters per token of lora_moe's rank 9
