"""The GPU check's timing step: a NoRGa-prompted ViT-B/16 against plain timm, bf16 autocast, eager and compiled.

ViT-B/16 at 224 px, batch 64, random weights (the speed does not depend on them; ``--tiny``: the smoke config's
2-block ViT at 32 px, batch 8). Five passes, each timed as the median of ``steps`` calls after one warm-up call
(whose seconds, compilation included, are kept as ``first_s``), with the peak memory of the timed calls:

* ``timm_forward``: timm's forward without gradients;
* ``timm_step``: timm's forward + backward to the input images (frozen weights: every block's activation
  gradients, no weight gradients), the work a prompted step does without its prompts;
* ``prompted_frozen`` / ``prompted_eval`` / ``prompted_train``: norga's :class:`~norga.models.PromptedViT` with
  NoRGa prefixes of length 5 on blocks 0-4 — a forward without prompts, a forward with them, and a training step
  (forward, backward to prompts and gates, Adam step), as :func:`norga.reproduce.estimate.backbone_passes`.

Compiled: timm's module through ``torch.compile``, norga's through its ``compile`` config key
(:func:`norga.models.compilation.compile_mode`, mode ``default``). ``--tiny`` compiles with the ``eager`` backend
(Dynamo's graph capture without Inductor's C++/Triton code generation, which takes minutes on a CPU).
"""
from __future__ import annotations

import copy
import statistics
import time
from typing import Callable, Dict, Optional, Tuple

import timm
import torch

from norga.models import PromptedViT, PromptPool
from norga.models import compilation
from norga.models.precision import amp_mode
from norga.reproduce.estimate import backbone_passes

FULL = {"model": "vit_base_patch16_224", "size": 224, "batch": 64, "steps": 5, "kwargs": {}}
TINY = {"model": "vit_base_patch16_224", "size": 32, "batch": 8, "steps": 2,
        "kwargs": {"patch_size": 4, "embed_dim": 64, "depth": 2, "num_heads": 2}}
PASSES = ("timm_forward", "timm_step", "prompted_frozen", "prompted_eval", "prompted_train")


def random_vit(spec: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(spec["model"], pretrained=False, num_classes=0, img_size=spec["size"], **spec["kwargs"])


def timed(fn: Callable[[], None], steps: int, device: torch.device, batch: int) -> dict:
    """``{"first_s", "median_s", "img_s", "peak_mib"}`` of ``fn`` (peak: CUDA's max allocated over the timed calls;
    None on the CPU)."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = round(torch.cuda.max_memory_allocated(device) / 2 ** 20) if cuda else None
    return {"first_s": round(first, 3), "median_s": round(median, 5), "img_s": round(batch / median, 1),
            "peak_mib": peak}


def timm_passes(vit: torch.nn.Module, x: torch.Tensor, compiled: Optional[Callable]) -> Dict[str, Callable]:
    """timm's forward and its step (backward to the images), under bf16 autocast."""
    forward = compiled if compiled is not None else vit
    images = x.clone().requires_grad_(True)

    def timm_forward():
        with torch.no_grad(), torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            forward(x)

    def timm_step():
        images.grad = None
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = forward(images)
        out.float().square().mean().backward()
    return {"timm_forward": timm_forward, "timm_step": timm_step}


def prompted_passes(vit: torch.nn.Module, x: torch.Tensor) -> Dict[str, Callable]:
    """norga's three passes (:func:`backbone_passes`) with NoRGa prefixes on blocks 0-4, under norga's bf16 mode."""
    layers = [i for i in range(5) if i < len(vit.blocks)]
    model = PromptedViT(vit, prompt_layers=layers, gate="norga").to(x.device).eval()
    model.freeze_backbone()
    pool = PromptPool(2, len(layers), 5, model.num_heads, model.head_dim).to(x.device)
    passes = backbone_passes(model, pool, x, torch.arange(len(x)) % 2)  # ids on the CPU: gather checks them there

    def in_bf16(fn):
        def run():
            with amp_mode("bf16"):
                fn()
        return run
    return {f"prompted_{name}": in_bf16(fn) for name, fn in passes.items()}


def compiled_norga(backend: str):
    """norga's compile mode ``default``; with ``backend`` other than inductor, its compiled function is replaced
    for this process (the ``--tiny`` path)."""
    if backend != "inductor":
        compilation._compiled["default"] = torch.compile(compilation.backbone_tokens, backend=backend)
    return compilation.compile_mode("default")


def compile_backend(tiny: bool) -> str:
    """Inductor on the GPU; Dynamo's ``eager`` backend with ``--tiny`` (no code generation, no compiler)."""
    return "eager" if tiny else "inductor"


def timing_step(device: torch.device, tiny: bool, emit: Callable[[str, dict], None],
                modes: Tuple[str, ...] = ("eager", "compiled")) -> dict:
    """Every pass in each of ``modes`` (``eager``, ``compiled``); each measurement is emitted as soon as it exists
    (a timeout keeps them)."""
    spec = TINY if tiny else FULL
    backend = compile_backend(tiny)
    vit = random_vit(spec).to(device).eval()
    for p in vit.parameters():
        p.requires_grad_(False)
    x = torch.randn(spec["batch"], 3, spec["size"], spec["size"], device=device)
    prompted = prompted_passes(copy.deepcopy(vit), x)  # PromptedViT wraps its ViT's attention modules in place
    results: Dict[str, dict] = {}
    for mode in modes:
        compiled = torch.compile(vit, backend=backend) if mode == "compiled" else None
        passes = {**timm_passes(vit, x, compiled), **prompted}
        for name in PASSES:
            if mode == "compiled" and name.startswith("prompted"):
                with compiled_norga(backend):
                    value = timed(passes[name], spec["steps"], device, spec["batch"])
            else:
                value = timed(passes[name], spec["steps"], device, spec["batch"])
            results[f"{mode}/{name}"] = value
            emit(f"{mode}/{name}", value)
    return {"spec": {k: v for k, v in spec.items()}, "compile_backend": backend, "passes": results,
            "ratios": ratios(results)}


def ratios(results: Dict[str, dict]) -> Dict[str, float]:
    """Prompted over plain timm seconds per pass (> 1: the prompts cost that factor), per mode."""
    out = {}
    for mode in ("eager", "compiled"):
        pairs = (("step", "prompted_train", "timm_step"), ("forward", "prompted_eval", "timm_forward"))
        for label, ours, theirs in pairs:
            a, b = results.get(f"{mode}/{ours}"), results.get(f"{mode}/{theirs}")
            if a and b:
                out[f"{mode}/{label}"] = round(a["median_s"] / b["median_s"], 3)
    return out


def measured_rates(results: Dict[str, dict], spec: dict, device_name: str) -> Optional[dict]:
    """The rates ``norga reproduce --quick-gpu`` reads (eager bf16 prompted passes), or None if not all measured."""
    names = {"train": "eager/prompted_train", "frozen": "eager/prompted_frozen", "eval": "eager/prompted_eval"}
    if not all(n in results for n in names.values()):
        return None
    rates = {key: results[name]["img_s"] for key, name in names.items()}
    return {**rates, "batch": spec["batch"], "amp": "bf16", "model": spec["model"], "image_size": spec["size"],
            "peak_mib": results[names["train"]]["peak_mib"], "device": device_name}
