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


def build_run_parts(cfg, device: str = "cpu"):
    """(resolved cfg, benchmark, method) of a config, as the runner builds them (nothing trained)."""
    from norga.continual.runner import build_data, build_vit, resolve_config
    from norga.methods import build_method

    cfg = resolve_config(cfg)
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    return cfg, bench, build_method(cfg, vit, bench.task_classes, torch.device(device))


def loaders_of(cfg, bench, method, task: int):
    """The runner's loaders of ``task`` for ``method``."""
    from norga.continual.runner import task_loaders

    return task_loaders(cfg, bench, task, method.train_batch_size)


def load_run_method(run_dir):
    """(cfg, bench, method) of a finished run with every task's checkpoint loaded (last one wins)."""
    from norga.config import load_config
    from norga.continual.rundir import RunDir

    cfg, bench, method = build_run_parts(load_config(Path(run_dir) / "config.yaml"))
    run = RunDir(run_dir)
    for t in range(run.scan().done):
        method.load_state_dict(run.load_checkpoint(t)["method"])
    return cfg, bench, method
