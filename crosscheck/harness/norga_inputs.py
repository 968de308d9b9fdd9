"""The inputs every norga side of a cross-check shares: the 5-task split of the small task (``TASKS``), the
overrides that make a shipped config the cross-check's model (DINOv2 ViT-S/14 at 56 px, ``COMMON``), real CIFAR-100
test images at 56 px (``real_batch``, ``at_56px``) and a built norga method (``method_of``).
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import torch
import torch.nn.functional as F

from crosscheck.harness.norga_cli import BACKBONE_OVERRIDES, REPO
from norga.config import load_config
from norga.engine.task_loop import build_vit, resolve_config
from norga.methods import build_method

TASKS = [list(range(10 * t, 10 * t + 10)) for t in range(5)]
COMMON = ["model.preset=null", "model.name=vit_small_patch14_dinov2", "data.image_size=56", "data.num_tasks=5",
          "data.classes_per_task=10"]


def real_batch(shared: Path, classes=range(8)) -> torch.Tensor:
    """The first CIFAR-100 test image of each of ``classes``, bicubic to 56 px, ImageNet mean/std: (N, 3, 56, 56)."""
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["test_y"] == c)[0][:1] for c in classes])
    return at_56px(data["test_x"][pick])


def at_56px(images: np.ndarray) -> torch.Tensor:
    """CIFAR images (N, 32, 32, 3) uint8 -> bicubic to 56 px, clamped to [0, 1], ImageNet mean/std: (N, 3, 56, 56)
    float32 (the preprocessing every cross-check gives both sides)."""
    img = torch.tensor(images).permute(0, 3, 1, 2).float() / 255
    img = F.interpolate(img, size=56, mode="bicubic", align_corners=False).clamp(0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    return (img - mean) / std


def backbone_overrides(weights: Path) -> List[str]:
    """The config overrides a stand-in backbone declares beside its weights file (``BACKBONE_OVERRIDES``, one
    ``KEY=VALUE`` a line, e.g. the CI task's smaller depth); none for the real ``../shared``."""
    declared = Path(weights).parent / BACKBONE_OVERRIDES
    return [ln.strip() for ln in declared.read_text().splitlines() if ln.strip()] if declared.is_file() else []


def method_of(config: str, overrides, weights: Path):
    """(vit, method): ``configs/<config>`` with :data:`COMMON`, ``weights`` (and its declared backbone overrides)
    and ``overrides``, built on the CPU for the 5 x 10 split :data:`TASKS`."""
    cfg = resolve_config(load_config(REPO / "configs" / config, COMMON + [f"model.checkpoint={weights}",
                                                                          *backbone_overrides(weights), *overrides]))
    vit = build_vit(cfg).eval()
    return vit, build_method(cfg, vit, TASKS, torch.device("cpu"))
