"""Shared fixtures: tiny timm ViTs and the optional ../shared folder."""
from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def tiny_vit(seed: int = 0, **overrides):
    """A 2-block ViT on 32 px images (patch 4, width 64, 2 heads), no head."""
    torch.manual_seed(seed)
    kwargs = dict(pretrained=False, num_classes=0, img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)
    kwargs.update(overrides)
    return timm.create_model("vit_base_patch16_224", **kwargs)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is absent (real data/weights only exist on the project's machines)")
    return SHARED
