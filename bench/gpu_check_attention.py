"""The GPU check's attention step: does the prefix attention at its augmented head dim take a fused SDPA kernel?

Two probes per dtype (fp32, bf16):

* **restricted**: :func:`norga.models.fast_prefix_attention` with a NoRGa gate (forward and backward) and a whole
  prompted ViT forward + backward, under ``torch.nn.attention.sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])``:
  PyTorch raises when no fused kernel accepts the call, so "ok" means flash or memory-efficient ran;
* **profiled**: the same prefix call unrestricted under ``torch.profiler``: the SDPA kernels PyTorch picked by
  itself, named (flash / memory-efficient / math, and the CPU's own flash kernel on the CPU).

The restricted probes are the ``attention`` step, the profiled one the ``attention_profile`` step, in its own
worker process (the profiler's CUPTI session stays out of the worker that times). On CUDA the first passes when
both dtypes run restricted, the second when the profiler saw a fused kernel and no math kernel; on the CPU both
report only (CUDA's fused kernels do not exist there).
"""
from __future__ import annotations

from typing import Callable, Dict, List

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from norga.models import PromptedViT, PromptPool, build_gate, fast_prefix_attention
from norga.models.checkpoints import first_line
from norga.models.precision import amp_mode
from norga.models.prefix_attention import padded_head_dim

FUSED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
PREFIX_LENGTH = 5
# kernel / operator name fragments -> backend (CUDA kernels and ATen operators, lower case)
BACKEND_MARKERS = (("flash_attention_for_cpu", "cpu-flash"), ("flashattentionforcpu", "cpu-flash"), ("flash", "flash"),
                   ("efficient", "memory-efficient"),
                   ("mem_eff", "memory-efficient"), ("fmha", "memory-efficient"), ("attention_math", "math"))


def backend_of(names: List[str]) -> List[str]:
    """The SDPA backends named in profiler event ``names`` (sorted, unique)."""
    found = set()
    for name in names:
        low = name.lower()
        for marker, backend in BACKEND_MARKERS:
            if marker in low:
                found.add(backend)
                break
    return sorted(found)


def prefix_call(shape: tuple, dtype: torch.dtype, device: torch.device) -> Callable[[], None]:
    """Forward + backward of the NoRGa-gated prefix attention on random (B, H, N, Dh) tensors of ``dtype``."""
    B, H, N, Dh = shape
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, H, N, Dh, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    pk, pv = (torch.randn(B, H, PREFIX_LENGTH, Dh, generator=g).to(device, dtype).requires_grad_() for _ in range(2))
    gate = build_gate("norga").to(device)

    def call():
        out = fast_prefix_attention(q, k, v, pk, pv, gate, Dh ** -0.5)
        out.float().square().mean().backward()
    return call


def model_call(vit: torch.nn.Module, amp: str, device: torch.device, size: int) -> Callable[[], None]:
    """Forward + backward to the prompts of a NoRGa-prompted ``vit`` (prefixes on blocks 0-4) under ``amp``."""
    layers = [i for i in range(5) if i < len(vit.blocks)]
    model = PromptedViT(vit, prompt_layers=layers, gate="norga").to(device).eval()
    model.freeze_backbone()
    pool = PromptPool(1, len(layers), PREFIX_LENGTH, model.num_heads, model.head_dim).to(device)
    x = torch.randn(2, 3, size, size, device=device)

    def call():
        with amp_mode(amp):
            model(x, pool.gather(torch.zeros(2, dtype=torch.long))).square().mean().backward()
    return call


def restricted(call: Callable[[], None]) -> Dict[str, str]:
    """Run ``call`` with only the fused backends allowed: ``{"status": "ok"}`` or the refusal's first line."""
    try:
        with sdpa_kernel(FUSED):
            call()
        return {"status": "ok"}
    except RuntimeError as err:
        return {"status": "no fused kernel", "error": first_line(err)}


def profiled(call: Callable[[], None], device: torch.device) -> Dict[str, List[str]]:
    """The SDPA backends and the attention kernel/operator names the profiler saw while ``call`` ran."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if "attention" in e.name.lower() or "fmha" in e.name.lower()
                    or "flash" in e.name.lower()})
    return {"backends": backend_of(names), "kernels": names[:12]}


def shapes(vit: torch.nn.Module, device: torch.device) -> dict:
    """The head dims of ``vit``'s attention and the augmented dim SDPA gets (the common part of both probes)."""
    heads, head_dim = vit.blocks[0].attn.num_heads, vit.blocks[0].attn.head_dim
    return {"head_dim": head_dim, "prefix_length": PREFIX_LENGTH, "heads": heads,
            "tokens": vit.patch_embed.num_patches + 1,
            "augmented_head_dim": padded_head_dim(head_dim + PREFIX_LENGTH), "device": str(device), "dtypes": {}}


DTYPES = (("off", torch.float32), ("bf16", torch.bfloat16))
CPU_NOTE = "CPU: backends reported only (CUDA's flash / memory-efficient kernels are not on the CPU)"


def sdpa_check(vit: torch.nn.Module, device: torch.device, size: int) -> dict:
    """The attention step (no profiler): per dtype the prefix call and the whole model under the fused backends
    only; on CUDA ``passed`` when all ran, on the CPU None (reported)."""
    out = shapes(vit, device)
    shape = (4, out["heads"], out["tokens"], out["head_dim"])
    for amp, dtype in DTYPES:
        out["dtypes"][amp] = {"prefix_restricted": restricted(prefix_call(shape, dtype, device)),
                              "model_restricted": restricted(model_call(vit, amp, device, size))}
    if device.type != "cuda":
        return {**out, "passed": None, "note": CPU_NOTE}
    out["passed"] = all(d["prefix_restricted"]["status"] == d["model_restricted"]["status"] == "ok"
                        for d in out["dtypes"].values())
    return out


def profile_check(vit: torch.nn.Module, device: torch.device) -> dict:
    """The attention_profile step (its own worker: CUPTI stays out of the timed steps): per dtype the backends the
    profiler saw for the unrestricted prefix call; on CUDA ``passed`` when each dtype named one and no math."""
    out = shapes(vit, device)
    shape = (4, out["heads"], out["tokens"], out["head_dim"])
    for amp, dtype in DTYPES:
        out["dtypes"][amp] = {"prefix_profiled": profiled(prefix_call(shape, dtype, device), device)}
    if device.type != "cuda":
        return {**out, "passed": None, "note": CPU_NOTE}
    out["passed"] = all(d["prefix_profiled"]["backends"] and "math" not in d["prefix_profiled"]["backends"]
                        for d in out["dtypes"].values())
    return out
