"""Shared fixtures: tiny timm ViTs, the tiny fault-injection run (trained once per session) and ../shared."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import timm
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: one worker per core, each with one torch thread
    torch.set_num_threads(1)
    # and so is every process a test starts (a gpu_check worker, a killed run): with torch's default of one thread
    # per core, N workers' children oversubscribe the cores (the two tiny GPU checks took 334 s each with torch's
    # default threads, 45 s with one)
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

# the longest test modules (minutes each under -n 2) are handed out first by pytest-xdist, so that none of them is
# left running alone on one core at the end while the other cores idle
SLOW_FIRST = ("test_mutants_run.py", "test_gpu_check_barebox.py", "test_gpu_check.py")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SMOKE = REPO_ROOT / "configs" / "smoke.yaml"  # the main job's embedded default: tiny random ViT, synthetic data
# the smoke config shortened: 2 tasks of 10 classes, 1-2 epochs per stage (every stage still runs)
SHORT_SMOKE = ["data.num_tasks=2", "data.options.num_classes=20", "method.tii.epochs=2", "method.tii.align_epochs=1",
               "method.wtp.epochs=2", "method.tap.epochs=1"]
# the tiny data of the per-method runs below: 3 tasks of 2 classes, 12 training and 6 test images per class
TINY_DATA = ["data.classes_per_task=2", "data.options={num_classes: 6, train_per_class: 12, test_per_class: 6}"]
L2P = ["method={name: l2p, pool_size: 4, prompt_length: 2, top_k: 2, epochs: 2, lr: 0.01, batch_size: 32, "
       "scale_lr_by_batch: false}"]
DUAL = ("method={name: dualprompt, g_prompt_layers: [0], e_prompt_layers: [1], g_prompt_length: 2, "
        "e_prompt_length: 3, gate: {name: norga, activation: tanh}, epochs: 2, lr: 0.05, batch_size: 32, "
        "scale_lr_by_batch: false}")
CODA = ("method={name: coda, prompt_layers: [0, 1], pool_size: 6, prompt_length: 4, ortho_mu: 0.1, epochs: 2, "
        "lr: 0.01, batch_size: 32}")
SPROMPT = ["method={name: sprompt, prompt_length: 3, centroids_per_task: 2, epochs: 2, lr: 0.05, batch_size: 64}"]
MH = "method={name: mh_moe, heads: 2, experts: 3, top_k: 1, rank: 2, epochs: 2, batch_size: 16, align_epochs: 2}"
LORA = "method={name: lora_moe, experts: 3, top_k: 2, rank: 3, epochs: 2, batch_size: 16, align_epochs: 2}"

# The exact versions CI installs (the Makefile's PINS). Tests of exact figures (bench/results/smoke.json, recorded
# under these versions) are skipped, with the versions that differ as the reason, when torch, torchvision, timm or
# numpy is not the pinned release (`make test-latest`); under the pins (`make test`, CI) they run.
PINS = REPO_ROOT / ".ci" / "pins.txt"
PINNED_TESTS = ("tests/test_smoke_figures.py::test_a_smoke_run_gives_exactly_the_committed_figures",)
PINNED_PACKAGES = ("torch", "torchvision", "timm", "numpy")


def unpinned_versions() -> list:
    """``'name installed (pinned X)'`` for each of PINNED_PACKAGES installed at another release than .ci/pins.txt's
    (a local label such as ``+cu130`` aside)."""
    from importlib import metadata

    pins = dict(line.strip().split("==", 1) for line in PINS.read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    differ = []
    for name in PINNED_PACKAGES:
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != pins.get(name):
            differ.append(f"{name} {installed} (pinned {pins.get(name)})")
    return differ


def pytest_collection_modifyitems(config, items):
    """The modules of :data:`SLOW_FIRST` first (a stable sort: a module's tests stay together and in their order);
    the tests of exact figures skipped, naming the versions, when the installed ones are not the pinned ones."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
    pinned = [item for item in items if item.nodeid.endswith(PINNED_TESTS)]
    differ = unpinned_versions() if pinned else []
    for item in pinned if differ else []:
        item.add_marker(pytest.mark.skip(reason="exact figures hold under .ci/pins.txt's versions; installed: "
                                                + ", ".join(differ)))


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
    its metrics.json) -- the smoke run a method's test module trains once (a module-scoped fixture). A shipped config
    (under configs/) is the test run's shared copy (:func:`shared_smoke_run`): read it, never write to it."""
    import json

    if config.resolve().is_relative_to(REPO_ROOT / "configs"):
        return shared_smoke_run(tmp_path_factory, config.resolve())

    from norga.commands.cli import train_main
    from norga.config import load_config

    out = tmp_path_factory.mktemp("runs") / name
    assert train_main(["--config", str(config), "--output-dir", str(out)]) == 0
    return load_config(out / "config.yaml"), out, json.loads((out / "metrics.json").read_text())


def train_tiny_run(tmp_path_factory, name: str, overrides: list):
    """(cfg, run folder, metrics) of the smoke config with ``overrides`` trained into ``<tmp>/runs*/name``."""
    from norga.config import load_config
    from norga.engine import run_training

    out = tmp_path_factory.mktemp("runs") / name
    cfg = load_config(SMOKE, overrides)
    return cfg, out, run_training(cfg, out)


def shared_root(tmp_path_factory) -> Path:
    """A folder every xdist worker of this test run shares (its base temp's parent under ``pytest -n N``, the
    session's own base temp otherwise: never shared with another pytest run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_smoke_run(tmp_path_factory, config: Path):
    """(cfg, run folder, metrics.json as read back) of ``norga train --config config``, trained once per test run:
    the first worker that asks trains it into ``<shared>/smoke_runs/<name>.partial`` under a file lock and renames it
    into place when it is complete; every other module (test_contract, test_export ...), on any worker, reads the
    same folder. Read it, never write to it: copy it (``shutil.copytree``) to change anything."""
    import json

    from filelock import FileLock

    from norga.config import load_config
    from norga.engine import run_training

    root = shared_root(tmp_path_factory) / "smoke_runs"
    root.mkdir(exist_ok=True)
    name = config.relative_to(REPO_ROOT / "configs").with_suffix("").as_posix().replace("/", "__")
    out, partial = root / name, root / f"{name}.partial"
    with FileLock(str(root / f"{name}.lock")):
        if not out.is_dir():
            if partial.exists():  # a worker that died while training: start again
                import shutil

                shutil.rmtree(partial)
            run_training(load_config(config), partial)
            partial.rename(out)
    return load_config(out / "config.yaml"), out, json.loads((out / "metrics.json").read_text())


# Each method's tiny run, trained once per session (per worker under pytest-xdist) for every test that reads it.
# Read them, never write to them.
@pytest.fixture(scope="session")
def l2p_run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory, "l2p", TINY_DATA + L2P)


@pytest.fixture(scope="session")
def dual_run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory, "dualprompt", TINY_DATA + [DUAL])


@pytest.fixture(scope="session")
def coda_run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory, "coda", TINY_DATA + [CODA])


@pytest.fixture(scope="session")
def sprompt_run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory, "sprompt", TINY_DATA + SPROMPT)


@pytest.fixture(scope="session", params=[MH, LORA], ids=["mh_moe", "lora_moe"])
def moe_run(request, tmp_path_factory):
    return train_tiny_run(tmp_path_factory, "moe", TINY_DATA + [request.param])


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
