"""Fault injection, bad input: every mistake in config, data, weights or output folder is one line (exit 2),
with --dry-run and without, and leaves nothing behind; hub weights are checked offline."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from faults import assert_one_line_error, train_args
from norga.commands.cli import main as norga


def cli(capsys, *argv: str):
    """``norga ...`` in this process: (exit status, stdout, stderr)."""
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- one clear line for bad input ------------------------------------------------------------
def write_npz(path: Path, **change):
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = dict(train_x=rng.integers(0, 255, (24, 16, 16, 3), dtype=np.uint8), train_y=np.repeat(np.arange(4), 6),
                  test_x=rng.integers(0, 255, (8, 16, 16, 3), dtype=np.uint8), test_y=np.repeat(np.arange(4), 2))
    arrays.update(change)
    np.savez(path, **arrays)
    return path


def bad_inputs(tmp: Path) -> dict:
    """case -> (extra train arguments, fragments of the expected one-line message)."""
    import numpy as np
    import torch
    from conftest import tiny_vit

    good = write_npz(tmp / "good.npz")
    (tmp / "truncated.npz").write_bytes(good.read_bytes()[:700])
    (tmp / "random.npz").write_bytes(bytes(range(256)) * 8)
    (tmp / "random.pth").write_bytes(bytes(range(256)) * 8)
    torch.save(tiny_vit(embed_dim=32).state_dict(), tmp / "other_arch.pth")
    (tmp / "bad.yaml").write_text("data:\n  num_tasks: 3\n   bad: [\n")
    (tmp / "empty.yaml").write_text("")
    (tmp / "a_file").write_text("x")
    arr = lambda name, **c: ["--set", "data.name=array", "--set", f"data.root={write_npz(tmp / name, **c)}",
                             "--set", "data.options={}", "--set", "data.num_tasks=2",
                             "--set", "data.classes_per_task=null"]
    rng = np.random.default_rng(1)
    return {
        "prompt layer out of range": (["--set", "method.prompt_layers=[0, 7]"],
                                      ["method.prompt_layers [0, 7]", "2 blocks"]),
        "gate typo": (["--set", "method.gate.name=norgaa"], ["method.gate.name: unknown gate 'norgaa'"]),
        "yaml syntax": (["--config", str(tmp / "bad.yaml")], ["bad.yaml: invalid YAML at line 3, column 7"]),
        "empty config": (["--config", str(tmp / "empty.yaml")], ["empty.yaml is empty"]),
        "output is a file": (["--output-dir", str(tmp / "a_file")], ["exists and is not a folder"]),
        "truncated npz": (["--set", "data.name=array", "--set", f"data.root={tmp / 'truncated.npz'}",
                           "--set", "data.options={}"], ["not a readable .npz archive", "truncated"]),
        "random bytes npz": (["--set", "data.name=array", "--set", f"data.root={tmp / 'random.npz'}",
                              "--set", "data.options={}"], ["not an .npz archive"]),
        "npz path is a folder": (["--set", "data.name=array", "--set", f"data.root={tmp}", "--set", "data.options={}"],
                                 ["is a folder; it must be the .npz file itself"]),
        "empty arrays": (arr("empty.npz", train_x=np.zeros((0, 16, 16, 3), np.uint8), train_y=np.zeros(0, int)),
                         ["train_x must be a non-empty", "(0, 16, 16, 3)"]),
        "channel first": (arr("chw.npz", train_x=rng.integers(0, 255, (24, 3, 16, 16), dtype=np.uint8)),
                          ["looks channel-first (N, C, H, W)", "transpose(0, 2, 3, 1)"]),
        "two channels": (arr("c2.npz", train_x=rng.integers(0, 255, (24, 16, 16, 2), dtype=np.uint8)),
                         ["1 (gray), 3 (RGB) or 4 (RGBA) channels"]),
        "float images": (arr("f.npz", train_x=rng.random((24, 16, 16, 3)).astype(np.float32)),
                         ["train_x must be uint8", "float32"]),
        "negative label": (arr("neg.npz", train_y=np.repeat(np.arange(-1, 3), 6)), ["negative labels (e.g. -1)"]),
        "class without test images": (arr("nt.npz", test_y=np.array([0, 0, 1, 1, 2, 2, 2, 2])),
                                      ["classes [3] have no test images"]),
        "tasks do not divide classes": (arr("ok.npz") + ["--set", "data.num_tasks=3", "--set",
                                                         "data.classes_per_task=null"],
                                        ["4 classes cannot be split into 3 tasks", "choose data.num_tasks dividing 4"]),
        "random bytes checkpoint": (["--set", f"model.checkpoint={tmp / 'random.pth'}"],
                                    ["cannot read checkpoint", "not a PyTorch checkpoint"]),
        "checkpoint of another architecture": (["--set", f"model.checkpoint={tmp / 'other_arch.pth'}"],
                                               ["does not match", "tensors have other shapes"]),
    }


CASES = ["prompt layer out of range", "gate typo", "yaml syntax", "empty config", "output is a file", "truncated npz",
         "random bytes npz", "npz path is a folder", "empty arrays", "channel first", "two channels", "float images",
         "negative label", "class without test images", "tasks do not divide classes", "random bytes checkpoint",
         "checkpoint of another architecture"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "train"])
def test_bad_input_is_one_line_and_leaves_nothing(case, dry_run, tmp_path, capsys):
    extra, fragments = bad_inputs(tmp_path)[case]
    out = tmp_path / "out"
    args = train_args(out) + extra + (["--dry-run"] if dry_run else [])
    status, _, err = cli(capsys, "train", *args)
    assert_one_line_error(status, err, *fragments)
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


def test_data_path_mistake_when_the_run_folder_holds_results(tmp_path, capsys):
    """Bad input on resume: one line, and the completed tasks' files are untouched."""
    import io

    import torch
    from norga.engine.run_folder import RunDir, sha256_hex

    run = RunDir(tmp_path / "run")
    run.write_config({"seed": 0})
    for t in range(2):  # two "completed" tasks: small checkpoints (task and config only) with matching checksums
        buffer = io.BytesIO()
        torch.save({"task": t, "config": {"seed": 0}}, buffer)
        data = buffer.getvalue()
        run.checkpoints.mkdir(exist_ok=True)
        run.checkpoint_path(t).write_bytes(data)
        run.checksum_path(t).write_text(f"{sha256_hex(data)}  {run.checkpoint_path(t).name}\n")
    before = {p.name: p.read_bytes() for p in run.root.rglob("*") if p.is_file()}
    status, _, err = cli(capsys, "train", *train_args(run.root, "--force", "--set", "data.name=array",
                                                      "--set", f"data.root={tmp_path}", "--set", "data.options={}"))
    assert_one_line_error(status, err, "is a folder")
    assert {p.name: p.read_bytes() for p in run.root.rglob("*") if p.is_file()} == before


# ---- backbone weights from the hub, offline ----------------------------------------------------
HUB_NAME = "vit_tiny_patch16_224.augreg_in21k"
HUB_ARGS = ["--set", f"model.name={HUB_NAME}", "--set", "model.pretrained=true"]


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_offline_hub_weights_fail_in_dry_run_and_before_training(empty_hub_cache, tmp_path, capsys, monkeypatch):
    import socket

    out = tmp_path / "run"
    status, _, err = cli(capsys, "train", *train_args(out, *HUB_ARGS, "--dry-run"))
    assert_one_line_error(status, err, f"timm hub weights for {HUB_NAME} are not in the local cache",
                          "model.checkpoint=PATH")
    try:
        socket.getaddrinfo("huggingface.co", 443)
        pytest.skip("this machine reaches the hub: the offline training path cannot be tested for real")
    except OSError:
        pass
    started = time.time()
    status, _, err = cli(capsys, "train", *train_args(out, *HUB_ARGS))
    assert_one_line_error(status, err, "hub cannot be reached (offline)", "model.checkpoint=PATH")
    assert time.time() - started < 60 and not out.exists()


def test_cached_hub_weights_are_used_without_network(empty_hub_cache, tmp_path, capsys, monkeypatch):
    import timm
    from huggingface_hub import constants
    from safetensors.torch import save_file

    arch = dict(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=2)  # configs/smoke.yaml's
    weights = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, **arch).state_dict()
    repo = empty_hub_cache / f"models--timm--{HUB_NAME}"
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(snapshot / "model.safetensors"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    status, out, err = cli(capsys, "train", *train_args(tmp_path / "run", *HUB_ARGS, "--dry-run"))
    assert status == 0, err[-2000:]
    assert "timm hub weights, cached at" in out and "(loaded strictly: OK)" in out
