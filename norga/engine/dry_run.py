"""``norga train --dry-run``: check config, data, images, weights and method together; train nothing.

Every problem found is collected and reported at once in one error (not one per attempt): the device (a GPU
that is not there, as training would report it), the data (read and split), every image file the benchmark
will decode (``full``; ``quick``: a seeded sample of :data:`norga.data.readability.QUICK_SAMPLE`), the
method's options, and the backbone weights. Each unreadable
image is also listed on its own stderr line. A problem with the architecture itself (an unknown timm name)
stops at once: nothing else can be checked without it.
"""
from __future__ import annotations

import copy
import sys

import torch

from ..config import Config, ConfigError
from ..data.readability import QUICK_SAMPLE, image_files, unreadable_images
from ..errors import NorgaError
from ..methods import build_method
from ..models.backbone import BACKBONE_PRESETS, hub_weights_status
from ..models.hub_weights import checkpoint_file, is_hub_reference
from ..toolkit.devices import resolve_device
from .problems import Problems
from .task_loop import build_data, build_vit, resolve_config

DECODE_MODES = ("full", "quick")


def _weights(cfg: Config) -> str:
    """What the backbone's weights are, after loading them strictly (hub weights only from the local cache)."""
    m = cfg.model
    if is_hub_reference(m.checkpoint):
        path = checkpoint_file(m.checkpoint, download=False)  # WeightsUnavailable when not in the cache
        build_vit(cfg)
        return f"Hub file {m.checkpoint}, cached at {path} (loaded strictly: OK)"
    if m.checkpoint:
        build_vit(cfg)  # raises a CheckpointError naming missing/unexpected keys
        return f"local file {m.checkpoint} (loaded strictly: OK)"
    if not m.pretrained:
        return "random init"
    status = hub_weights_status(m.name or BACKBONE_PRESETS[m.preset].model_name)  # offline-safe
    build_vit(cfg)
    return status + " (loaded strictly: OK)"


def _decode_images(bench, mode: str) -> str:
    """Decode the benchmark's image files; raise listing the unreadable ones (each also on its own stderr line)."""
    files = image_files(bench.raw.train_x, bench.raw.test_x)
    if not files:
        return "images: in memory (nothing to decode)"
    checked, bad = unreadable_images(files, sample=QUICK_SAMPLE if mode == "quick" else None)
    scope = (f"a seeded sample of {checked} of the {len(files)} image files (--dry-run full decodes all)"
             if checked < len(files) else f"the {len(files)} image files")
    if bad:
        for path, problem in bad:
            print(f"unreadable image: {path} ({problem})", file=sys.stderr)
        raise NorgaError(f"{len(bad)} of {scope} cannot be decoded (each listed above), e.g. {bad[0][0]} "
                         f"({bad[0][1]}); replace or delete them, then run the dry run again")
    return f"images: decoded {scope}: OK"


def dry_run(cfg: Config, decode: str = "full") -> str:
    """Validate config, data, images, checkpoint and method; return the task split summary. Trains nothing.

    Data is checked with the architecture only (no weights), so a missing data folder is reported without
    downloading anything; a local checkpoint is loaded strictly; hub weights (``pretrained: true``) are never
    downloaded. The method config's report (which of the authors' behaviours it selects) is printed first.
    Raises one NorgaError listing every problem found.
    """
    if decode not in DECODE_MODES:
        raise ConfigError(f"--dry-run {decode!r}: choose one of {list(DECODE_MODES)}")
    report = cfg.method.report(cfg)
    if report:
        print(report, flush=True)
    cfg = resolve_config(cfg)
    arch_only = copy.deepcopy(cfg)
    arch_only.model.pretrained, arch_only.model.checkpoint = False, None
    vit = build_vit(arch_only)
    found = Problems()
    device = found.attempt(lambda: resolve_device(cfg.device))  # a GPU that is not there: a problem, as in training
    bench = found.attempt(lambda: build_data(cfg, vit))
    method = bench and found.attempt(lambda: build_method(arch_only, vit, bench.task_classes, torch.device("cpu")))
    weights = found.attempt(lambda: _weights(cfg))
    images = bench and found.attempt(lambda: _decode_images(bench, decode))
    found.raise_any("the dry run")
    params = sum(p.numel() for p in vit.parameters()) / 1e6
    head = (f"device: {device} (device: {cfg.device})\n"
            f"backbone: {cfg.model.name or cfg.model.preset} ({params:.1f} M params), weights: {weights}\n"
            f"{method.summary()}\n{images}")
    return head + "\n" + bench.summary()
