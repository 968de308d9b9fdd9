"""Shared fixtures: tiny timm ViTs, the tiny fault-injection run (trained once per session) and ../shared."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import timm
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: one worker per core, each with one torch thread
    torch.set_num_threads(1)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"  # the main job's embedded default: tiny random ViT, synthetic data
# the smoke config shortened: 2 tasks of 10 classes, 1-2 epochs per stage (every stage still runs)
SHORT_SMOKE = ["data.num_tasks=2", "data.options.num_classes=20", "method.tii.epochs=2", "method.tii.align_epochs=1",
               "method.wtp.epochs=2", "method.tap.epochs=1"]


def tiny_vit(seed: int = 0, **overrides):
    """A 2-block ViT on 32 px images (patch 4, width 64, 2 heads), no head."""
    torch.manual_seed(seed)
    kwargs = dict(pretrained=False, num_classes=0, img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)
    kwargs.update(overrides)
    return timm.create_model("vit_base_patch16_224", **kwargs)


def timm_features(vit, x):
    """timm's own pre-logits features (B, D) of images x (B, 3, H, W)."""
    return vit.forward_head(vit.forward_features(x), pre_logits=True)


def adapted_by_hand(vit, x, adapters, scale: float = 0.1):
    """Features (B, D) of the tiny ViT (no layer scale, no drop path) with adapter ``adapters[i]`` (a state dict of
    ``down``/``up`` weights and biases) beside block i's MLP, written out: h = x + attn(norm1(x));
    out = h + mlp(norm2(h)) + scale * up(relu(down(h))); then the final norm and the class token.
    Blocks may be wrapped (their timm block is ``.block``)."""
    tokens = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
    for i, a in enumerate(adapters):
        b = getattr(vit.blocks[i], "block", vit.blocks[i])
        h = tokens + b.attn(b.norm1(tokens))
        side = torch.relu(h @ a["down.weight"].T + a["down.bias"]) @ a["up.weight"].T + a["up.bias"]
        tokens = h + b.mlp(b.norm2(h)) + scale * side
    return vit.norm(tokens)[:, 0]


def train_smoke_run(tmp_path_factory, config: Path, name: str):
    """``norga train --config config`` into a fresh folder ``<tmp>/runs*/name``: (its saved config, the run folder,
    its metrics.json) -- the smoke run a method's test module trains once (a module-scoped fixture)."""
    import json

    from norga.commands.cli import train_main
    from norga.config import load_config

    out = tmp_path_factory.mktemp("runs") / name
    assert train_main(["--config", str(config), "--output-dir", str(out)]) == 0
    return load_config(out / "config.yaml"), out, json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The uninterrupted tiny run of tests/faults.py (``train_args``), trained in this process once per session
    (per worker under pytest-xdist): the yardstick of the fault tests. Read it, never write to it (copy it:
    ``faults.copy_run``)."""
    from faults import train_args
    from norga.commands.cli import main as norga

    out = tmp_path_factory.mktemp("tiny_run") / "run"
    assert norga(["train", *train_args(out)]) == 0
    return out


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is absent (real data/weights only exist on the project's machines)")
    return SHARED


def build_run_parts(cfg, device: str = "cpu"):
    """(resolved cfg, benchmark, method) of a config, as the runner builds them (nothing trained)."""
    from norga.engine.task_loop import build_data, build_vit, resolve_config
    from norga.methods import build_method

    cfg = resolve_config(cfg)
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    return cfg, bench, build_method(cfg, vit, bench.task_classes, torch.device(device))


def loaders_of(cfg, bench, method, task: int):
    """The runner's loaders of ``task`` for ``method``."""
    from norga.engine.task_loop import task_loaders

    return task_loaders(cfg, bench, task, method.train_batch_size)


def load_run_method(run_dir):
    """(cfg, bench, method) of a finished run with every task's checkpoint loaded (last one wins)."""
    from norga.config import load_config
    from norga.engine.run_folder import RunDir

    cfg, bench, method = build_run_parts(load_config(Path(run_dir) / "config.yaml"))
    run = RunDir(run_dir)
    for t in range(run.scan().done):
        method.load_state_dict(run.load_checkpoint(t)["method"])
    return cfg, bench, method


def checkpoint_method_state(run_dir, task: int) -> dict:
    """The method's part of the checkpoint of ``task`` in a run directory."""
    import torch

    return torch.load(Path(run_dir) / "checkpoints" / f"task_{task:02d}.pt", weights_only=True)["method"]


def assert_predictions_per_sample(cfg, run_dir, task: int, indices=(0, 5, -1)):
    """Predicting test samples of ``task`` alone gives what the whole batch gave them: logits, true-task logits and
    (when the method infers one) the task id. Returns (method, images, whole-batch prediction)."""
    import torch

    from norga.methods.base import TestBatch

    _, bench, method = load_run_method(run_dir)
    x, _ = next(iter(loaders_of(cfg, bench, method, task).test))
    seen = torch.ones(method.num_classes, dtype=torch.bool)
    whole = method.predict(TestBatch(x, task, torch.arange(len(x)), len(x), seen))
    for i in (int(i) % len(x) for i in indices):
        alone = method.predict(TestBatch(x[i:i + 1], task, torch.tensor([0]), 1, seen))
        assert torch.allclose(alone.logits[0], whole.logits[i], atol=1e-5)
        assert torch.allclose(alone.true_task_logits[0], whole.true_task_logits[i], atol=1e-5)
        if whole.task_ids is not None:
            assert alone.task_ids.tolist() == [int(whole.task_ids[i])]
    return method, x, whole


def assert_reevaluation_identical(run_dir, metrics: dict, keys=("acc_matrix", "til_acc_matrix")) -> None:
    """``eval.py``'s recomputation from the checkpoints equals the training run's metrics."""
    from norga.engine import evaluate_run

    again = evaluate_run(run_dir)
    for key in keys:
        assert again[key] == metrics[key], key
