"""``python -m bench.gpu_check --prepare DIR``: the folder the GPU check reads, made on a CPU machine.

DIR (git-ignored, <= 60 MiB) holds

* ``data.npz``: the cross-check's small task (CIFAR-100 classes 0-49, the first 20 training / 10 test images per
  class, :func:`bench.small_task.small_task`; uint8 (N, 32, 32, 3) images and int64 labels);
* ``weights.safetensors``: the DINOv2 ViT-S/14 of ``../shared`` converted by timm to 56 px (position grid 4 x 4),
  fp16 as the source file;
* ``config.yaml``: the NoRGa run on that task (the resolved norga config; data.root / model.checkpoint are set to
  the folder's files when it is read);
* ``reference.json``: that run's accuracy matrix on this CPU (fp32), and every registered method's smoke-config FA
  on this CPU, with versions and seconds;
* ``manifest.json``: sha256 and bytes of the four files and their total.

``--tiny`` prepares the same layout from a stand-in source (:func:`make_tiny_source`: synthetic CIFAR-like images
and a random 2-block ViT), through the same code (``--tiny`` without ``--data`` and the tests).
"""
from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
import yaml

from bench.small_task import first_per_class, small_task
from norga.config import config_to_dict, load_config
from norga.errors import NorgaError
from norga.files import sha256_file

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 60 * 2 ** 20
DATA, WEIGHTS, CONFIG, REFERENCE, MANIFEST = "data.npz", "weights.safetensors", "config.yaml", "reference.json", \
    "manifest.json"
LISTED = (DATA, WEIGHTS, CONFIG, REFERENCE)
# TAP sized to the check: the shipped NoRGa config's 80 epochs x 640 pseudo-features per seen class are, over tasks
# 1-4 (20 + 30 + 40 + 50 = 140 seen classes), 7.2e6 draws of 384-dim float64 normals (2.75e9 numbers) in one CPU
# thread (minutes on any machine: the pseudo-features are drawn on the CPU); 10 epochs x 128 per class are 179,200
# features (6.9e7 numbers, 40x fewer)
TAP = ["method.tap.epochs=10", "method.tap.samples_per_class=128", "method.tap.batch_size=128"]
# the NoRGa run of the cross-check's protocol (docs/crosscheck.md): the shipped NoRGa config with the tanh gate,
# 5 epochs of TII and WTP at batch 20 (lr 0.032 x 20/256), evaluated as the authors' code does (every class)
SMALL_TASK = ["seed=42", "device=cpu", "amp=off", "eval_batch_size=100", "eval_mask_unseen=false",
              "data.name=array", "data.num_tasks=5", "data.classes_per_task=10", "data.class_order=seed",
              "data.class_order_rng=python", "data.transforms=cifar", "data.num_workers=0",
              "model.preset=null", "model.pretrained=false", "method.gate.activation=tanh",
              "method.tii.epochs=5", "method.tii.batch_size=20", "method.wtp.epochs=5", "method.wtp.batch_size=20",
              "method.wtp.lr=0.032", *TAP]
DINOV2 = ["model.name=vit_small_patch14_dinov2", "data.image_size=56"]
# the tiny variant: the smoke config's ViT (2 blocks, width 64) on 32 px synthetic images, every stage shortened
TINY = ["model.name=vit_base_patch16_224", "data.image_size=32", "data.classes_per_task=2",
        "model.timm_kwargs={patch_size: 4, embed_dim: 64, depth: 2, num_heads: 2}", "method.prompt_layers=[0, 1]",
        "method.tii.epochs=1", "method.wtp.epochs=1", "method.tii.align_epochs=2", "method.tap.epochs=2",
        "method.tii.samples_per_class=16", "method.tap.samples_per_class=16"]


class PreparedFolderError(NorgaError):
    """The prepared folder is missing, incomplete, altered or too large."""


def small_task_config(folder: Path, overrides: List[str]):
    """The NoRGa config of the prepared folder's task (device cpu, amp off) reading ``folder``'s files."""
    return load_config(REPO / "configs" / "cifar100_norga.yaml",
                       SMALL_TASK + overrides + [f"data.root={folder / DATA}", f"model.checkpoint={folder / WEIGHTS}"])


def folder_config(folder: Path, extra: List[str] = ()):
    """The config stored in a prepared ``folder``, pointed at its files, with ``extra`` overrides."""
    return load_config(folder / CONFIG, [f"data.root={folder / DATA}", f"model.checkpoint={folder / WEIGHTS}",
                                         *extra])


@contextlib.contextmanager
def without_plots():
    """Runs of the check skip the run plots (matplotlib on the CPU, no device code; ~3 s per smoke run): a stand-in
    ``norga.reports.plots`` module whose ``write_run_plots`` does nothing, so matplotlib is never imported (it may
    not be installed on the GPU machine). Only that one entry of ``sys.modules`` is set and restored (the modules a
    run imports stay imported: norga's registries must not see them twice)."""
    name, missing = "norga.reports.plots", object()
    stand_in = types.ModuleType(name)
    stand_in.write_run_plots = lambda *args, **kwargs: None
    before = sys.modules.get(name, missing)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        if before is missing:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before


def train(cfg, out: Path, keep: Optional[Path] = None) -> dict:
    """``run_training`` without plots; ``{"acc_matrix", "FA", "seconds"}`` (accuracies as fractions). With ``keep``,
    the run's ``metrics.json`` is copied there and the run folder (checkpoints) deleted."""
    from norga.engine import run_training

    start = time.perf_counter()
    try:
        with without_plots():
            metrics = run_training(cfg, out)
    finally:
        if keep is not None:
            keep_metrics(Path(out), keep)
    return {"acc_matrix": metrics["acc_matrix"], "FA": metrics["FA"], "seconds": round(time.perf_counter() - start, 2)}


def keep_metrics(run: Path, keep: Path) -> None:
    """Copy ``run``/metrics.json (when written) to ``keep`` and delete the run folder."""
    import shutil

    if (run / "metrics.json").is_file():
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / "metrics.json", keep)
    shutil.rmtree(run, ignore_errors=True)


def smoke_reference(device: str = "cpu") -> Dict[str, float]:
    """FA of every registered method's smoke config (fp32) on ``device``: ``{method: FA}``."""
    from norga.config import method_configs

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(method_configs()):
            cfg = load_config(REPO / "configs" / "smoke" / f"{name}.yaml", [f"device={device}", "amp=off"])
            out[name] = train(cfg, Path(tmp) / name)["FA"]
    return out


def save_weights(vit: torch.nn.Module, path: Path, dtype: torch.dtype) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().to(dtype).contiguous() for k, v in vit.state_dict().items()}, str(path))


def write_folder(folder: Path, data: Dict[str, np.ndarray], vit: torch.nn.Module, overrides: List[str],
                 weights_dtype: torch.dtype, sources: dict, smoke: bool = True) -> dict:
    """Write the four files and the manifest into ``folder``; returns the manifest. The reference run reads the
    written weights, so the CPU and GPU runs start from the same (stored) tensors."""
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / DATA, **data)
    save_weights(vit, folder / WEIGHTS, weights_dtype)
    cfg = small_task_config(folder, overrides)
    stored = config_to_dict(cfg)
    stored["data"]["root"], stored["model"]["checkpoint"] = DATA, WEIGHTS  # set to the folder's files when read
    (folder / CONFIG).write_text(yaml.safe_dump(stored, sort_keys=False))
    print(f"[prepare] CPU reference run of NoRGa on the small task ({torch.get_num_threads()} threads) ...",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        reference = train(folder_config(folder), Path(tmp) / "norga")
    reference.update(device="cpu", amp="off", threads=torch.get_num_threads(), torch=torch.__version__,
                     python=platform.python_version())
    if smoke:
        print("[prepare] CPU smoke runs of every registered method (fp32) ...", flush=True)
        reference["smoke_FA"] = smoke_reference()
    (folder / REFERENCE).write_text(json.dumps(reference, indent=1))
    return write_manifest(folder, sources)


def write_manifest(folder: Path, sources: dict) -> dict:
    files = {name: {"sha256": sha256_file(folder / name), "bytes": (folder / name).stat().st_size} for name in LISTED}
    manifest = {"files": files, "total_bytes": sum(f["bytes"] for f in files.values()), "limit_bytes": LIMIT_BYTES,
                "sources": sources, "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    size = folder_bytes(folder)
    if size > LIMIT_BYTES:
        raise PreparedFolderError(f"{folder} holds {size / 2 ** 20:.1f} MiB, over the {LIMIT_BYTES // 2 ** 20} MiB "
                                  "limit; remove other files from it and prepare again")
    return manifest


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (what travels to the GPU machine)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def verify(folder: Path) -> dict:
    """The manifest of a prepared ``folder`` after checking every listed file's size and sha256."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise PreparedFolderError(f"{folder} has no {MANIFEST}: make it with python -m bench.gpu_check --prepare "
                                  f"{folder} on a machine with ../shared and copy the whole folder")
    manifest = json.loads((folder / MANIFEST).read_text())
    bad = [name for name, f in manifest["files"].items()
           if not (folder / name).is_file() or (folder / name).stat().st_size != f["bytes"]
           or sha256_file(folder / name) != f["sha256"]]
    if bad:
        raise PreparedFolderError(f"{folder}: {', '.join(bad)} missing or not the prepared file (checksum); copy the "
                                  "folder again or prepare it again with --prepare")
    return manifest


def read_reference(folder: Path) -> dict:
    """The CPU reference of a prepared ``folder`` (``{}`` when the folder has none)."""
    path = Path(folder) / REFERENCE
    return json.loads(path.read_text()) if path.is_file() else {}


def check_ignored(folder: Path) -> None:
    """Refuse a folder inside the checkout that git would track (the prepared data must not be committed)."""
    folder = folder.resolve()
    if REPO not in folder.parents and folder != REPO:
        return
    try:
        probe = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(folder / DATA)], capture_output=True)
    except OSError:  # no git on this machine: nothing can be committed from here either
        return
    if probe.returncode == 1:
        raise PreparedFolderError(f"{folder} is inside the checkout and not git-ignored; prepare into "
                                  "runs/gpu_check_data (runs/ is ignored) or a folder outside the checkout")


@dataclass(frozen=True)
class Preset:
    """What --prepare takes from the shared folder: the config overrides of its model and image size, the weights
    file under the shared folder, the dtype they are stored in, and the images picked from the CIFAR-100 file."""
    overrides: List[str]
    weights: str
    dtype: torch.dtype
    select: Callable[[dict], dict]


PRESETS = {"dinov2": Preset(DINOV2, "weights/dinov2_vits14_imgfocus.safetensors", torch.float16, small_task),
           "tiny": Preset(TINY, "weights/tiny_vit.safetensors", torch.float32,
                          lambda data: first_per_class(data, 10, {"train": 8, "test": 4}))}


def prepare_from_shared(folder: Path, shared: Path, preset: str = "dinov2", smoke: bool = True) -> dict:
    """The folder from ``shared``/data/cifar100.npz and the preset's weights (converted to its image size)."""
    from norga.engine.task_loop import build_vit

    spec = PRESETS[preset]
    cifar, weights = shared / "data" / "cifar100.npz", shared / spec.weights
    missing = [str(p) for p in (cifar, weights) if not p.is_file()]
    if missing:
        raise PreparedFolderError(f"--shared {shared}: {', '.join(missing)} not found; pass --shared PATH, the "
                                  f"folder with data/cifar100.npz and {spec.weights}")
    check_ignored(folder)
    vit = build_vit(load_config(None, spec.overrides + ["model.pretrained=false", f"model.checkpoint={weights}"]))
    sources = {"cifar100.npz": sha256_file(cifar), spec.weights: sha256_file(weights), "preset": preset}
    return write_folder(folder, spec.select(dict(np.load(cifar))), vit, spec.overrides, spec.dtype, sources, smoke)


def synthetic_cifar(classes: int = 10, train: int = 8, test: int = 4, size: int = 32, seed: int = 0) -> dict:
    """Class-dependent random images (each class a colour plus noise), uint8 (N, size, size, 3), int64 labels."""
    g = np.random.default_rng(seed)
    colours = g.uniform(40, 215, size=(classes, 1, 1, 3))
    out = {}
    for split, n in (("train", train), ("test", test)):
        y = np.tile(np.arange(classes), n)  # classes interleaved, as in the real file
        x = colours[y] + g.normal(0, 30, size=(len(y), size, size, 3))
        out[f"{split}_x"], out[f"{split}_y"] = np.clip(x, 0, 255).astype(np.uint8), y.astype(np.int64)
    return out


def make_tiny_source(shared: Path, classes: int = 10, train: int = 8, test: int = 4) -> Path:
    """A stand-in for ../shared: synthetic data/cifar100.npz and a random tiny ViT's weights/tiny_vit.safetensors."""
    from norga.engine.task_loop import build_vit

    (shared / "data").mkdir(parents=True, exist_ok=True)
    (shared / "weights").mkdir(parents=True, exist_ok=True)
    np.savez(shared / "data" / "cifar100.npz", **synthetic_cifar(classes, train, test))
    save_weights(build_vit(load_config(None, TINY + ["model.pretrained=false"])), shared / PRESETS["tiny"].weights,
                 torch.float32)
    return shared


def make_tiny_folder(folder: Path) -> Path:
    """A prepared folder (``folder``/prepared) from a tiny stand-in source, for --tiny without --data."""
    prepare_from_shared(folder / "prepared", make_tiny_source(folder / "source"), "tiny", smoke=False)
    return folder / "prepared"


def describe(manifest: dict, folder: Optional[Path] = None) -> str:
    lines = [f"  {name}: {f['bytes'] / 2 ** 20:.2f} MiB, sha256 {f['sha256'][:16]}..." for name, f in
             manifest["files"].items()]
    total = folder_bytes(folder) if folder else manifest["total_bytes"]
    return "\n".join(lines + [f"  total: {total / 2 ** 20:.2f} MiB (limit {manifest['limit_bytes'] // 2 ** 20} MiB)"])
