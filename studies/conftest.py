"""What the studies' tests share: the repository's paths and the optional ../shared folder (as tests/conftest.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"  # the main job's embedded default: tiny random ViT, synthetic data


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is absent (real data/weights only exist on the project's machines)")
    return SHARED
