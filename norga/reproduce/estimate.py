"""Estimated time and memory of a run: image passes of its config x images/s measured on this device.

:func:`workload` counts the backbone passes a run makes (torch-free): training steps (forward + backward to the
prompts), frozen forwards (no prompts, no gradients) and evaluation forwards, from the method's epochs and the
benchmark's image counts. :func:`measure_rates` times one short forward/backward of the config's backbone on the
current device (random weights: the speed does not depend on them), as ``bench/throughput.py`` does, and
:func:`estimate` divides. Estimates, not measurements: data loading, the Gaussian stages and
evaluation-time bookkeeping are not counted; on a GPU bf16 and the config's batch matter (pass ``--set amp=bf16``).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Dict, Optional

QUERY_METHODS = ("l2p", "dualprompt", "coda")  # a frozen query forward per training image per epoch
CPU_BATCH, GPU_BATCH, STEPS = 2, 32, 2  # measurement batch (images) on CPU / GPU, timed steps after one warm-up


@dataclass(frozen=True)
class Workload:
    """Backbone passes of one run (images)."""
    train: int
    frozen: int
    eval: int


@dataclass(frozen=True)
class Rates:
    """Images/s of the three passes on ``device`` and the training step's peak memory (MiB; None on the CPU) at
    ``batch``; on CUDA also the peak's growth per image (MiB), from a second step at batch 8."""
    device: str
    amp: str
    train: float
    frozen: float
    eval: float
    peak_mib: Optional[float]
    batch: int
    mib_per_image: Optional[float] = None

    def peak_at(self, batch: Optional[int]) -> Optional[float]:
        """The training step's peak memory extrapolated linearly to ``batch`` images (MiB), if measured."""
        if self.peak_mib is None or self.mib_per_image is None or not batch:
            return self.peak_mib
        return self.peak_mib + (batch - self.batch) * self.mib_per_image


def image_counts(cfg, benchmark_info: Optional[dict]) -> Optional[tuple]:
    """(train, test) images of the run: synthetic options, a per-class limit, or the manifest's counts; None if
    unknown."""
    d = cfg.data
    classes = (d.classes_per_task or 0) * d.num_tasks
    if d.name == "synthetic":
        opts = d.options
        n_cls = int(opts.get("num_classes", classes))
        return n_cls * int(opts.get("train_per_class", 1)), n_cls * int(opts.get("test_per_class", 1))
    images = (benchmark_info or {}).get("images") or {}
    if "train" not in images:
        return None
    train, test = int(images["train"]), int(images["test"])
    if d.train_per_class and classes:
        train = min(train, classes * d.train_per_class)
    if d.test_per_class and classes:
        test = min(test, classes * d.test_per_class)
    return train, test


def workload(cfg, benchmark_info: Optional[dict] = None) -> Optional[Workload]:
    """Backbone passes of a run of ``cfg`` (None when the image counts are unknown)."""
    counts = image_counts(cfg, benchmark_info)
    if counts is None:
        return None
    n, m = counts
    tasks, method = cfg.data.num_tasks, cfg.method
    evaluation = m * (tasks + 1)  # after task t: (t + 1)/T of the test set, a plain and a prompted forward
    if hasattr(method, "wtp"):  # the HiDe-Prompt pipeline: TII on frozen features, WTP, statistics
        tii = 1 if method.tii.cache_features else method.tii.epochs
        return Workload(train=method.wtp.epochs * n, frozen=(tii + 1) * n + n, eval=evaluation)
    epochs = int(getattr(method, "epochs", 0) or 0)
    frozen = epochs * n if cfg.method.name in QUERY_METHODS else n
    return Workload(train=epochs * n, frozen=frozen, eval=evaluation)


def measure_rates(cfg) -> Rates:
    """Time the config's backbone on its device: a prompted training step, a frozen and a prompted forward."""
    import torch

    from ..engine.task_loop import build_vit
    from ..models import PromptedViT, PromptPool
    from ..models.precision import amp_mode
    from ..toolkit.devices import resolve_device

    device = resolve_device(cfg.device)
    vit = build_vit(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pretrained=False, checkpoint=None)))
    layers = [i for i in (0, 1, 2, 3, 4) if i < len(vit.blocks)]
    model = PromptedViT(vit, prompt_layers=layers, gate="norga")
    model.freeze_backbone()
    pool = PromptPool(2, len(layers), 5, model.num_heads, model.head_dim)
    model, pool = model.to(device).eval(), pool.to(device)
    cuda = device.type == "cuda"
    batch = GPU_BATCH if cuda else CPU_BATCH
    size = cfg.data.image_size or vit.patch_embed.img_size[0]
    x = torch.randn(batch, 3, size, size, device=device)
    ids = torch.arange(batch) % 2
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    passes = backbone_passes(model, pool, x, ids)

    with amp_mode(cfg.amp):
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        rates = {name: batch / median_seconds(fn, STEPS, sync) for name, fn in passes.items()}
        if not cuda:
            return Rates(str(device), cfg.amp, rates["train"], rates["frozen"], rates["eval"], None, batch)
        peak = torch.cuda.max_memory_allocated(device) / 2 ** 20
        small_step = backbone_passes(model, pool, x[:8], ids[:8])["train"]  # the peak's growth per image
        torch.cuda.reset_peak_memory_stats(device)
        small_step()
        sync()
        per_image = max(peak - torch.cuda.max_memory_allocated(device) / 2 ** 20, 0.0) / (batch - 8)
    return Rates(str(device), cfg.amp, rates["train"], rates["frozen"], rates["eval"], peak, batch, per_image)


def backbone_passes(model, pool, x, ids) -> dict:
    """The three timed passes of a prompted backbone on images ``x`` (B, 3, H, W) with prompts ``ids`` (B,):
    ``train`` (an Adam step on the prompts and gates), ``frozen`` and ``eval`` (forwards without / with prompts)."""
    import torch

    optimizer = torch.optim.Adam(list(pool.parameters()) + list(model.gate_parameters()), lr=1e-3)

    def train():
        optimizer.zero_grad(set_to_none=True)
        model(x, pool.gather(ids)).square().mean().backward()
        optimizer.step()

    def frozen():
        with torch.no_grad():
            model(x)

    def evaluate():
        with torch.no_grad():
            model(x, pool.gather(ids))

    return {"train": train, "frozen": frozen, "eval": evaluate}


def median_seconds(step, steps: int, sync) -> float:
    """Median wall-clock seconds of ``step`` over ``steps`` calls after one warm-up (``sync`` waits for the device)."""
    step()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rate_key(cfg) -> tuple:
    """Runs whose rates are the same measurement: backbone, input size, timm options, device, amp."""
    m = cfg.model
    return (m.preset and "vit", m.name, cfg.data.image_size, repr(sorted(m.timm_kwargs.items())), cfg.device, cfg.amp)


def train_batch(cfg) -> Optional[int]:
    """Images per training step of the run (WTP's batch for the HiDe-Prompt pipeline), if the method has one."""
    method = cfg.method
    return getattr(getattr(method, "wtp", method), "batch_size", None)


def estimate(work: Optional[Workload], rates: Optional[Rates], batch: Optional[int] = None) -> Dict[str, object]:
    """``{"seconds": s or None, "peak_mib": "N MiB" or "n/a (CPU)", "passes": {...}}`` (an estimate; the peak
    extrapolated to the run's training ``batch`` on CUDA)."""
    if work is None or rates is None:
        return {"seconds": None, "peak_mib": None, "passes": None}
    seconds = work.train / rates.train + work.frozen / rates.frozen + work.eval / rates.eval
    peak_mib = rates.peak_at(batch)
    peak = f"{round(peak_mib)} MiB at batch {batch or rates.batch}" if peak_mib is not None else "n/a (CPU)"
    return {"seconds": seconds, "peak_mib": peak, "passes": work.__dict__,
            "rates_img_s": {"train": rates.train, "frozen": rates.frozen, "eval": rates.eval, "batch": rates.batch,
                            "device": rates.device, "amp": rates.amp}}


def human_seconds(seconds: Optional[float]) -> str:
    """``"3.2 h"``, ``"12 min"``, ``"40 s"``; ``"?"`` when unknown."""
    if seconds is None:
        return "?"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} d"
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
