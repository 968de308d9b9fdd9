"""Errors that come early and all at once (issue #32): gate names before torch, YAML booleans, paths, the dry run
decoding every image, the environment check and ``norga doctor``, a folder named ``norga`` shadowing the package."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from faults import ENV, REPO, SMOKE, assert_one_line_error, error_lines
from norga.commands.cli import main as norga
from norga.config import ConfigError, load_config
from norga.gates.schema import ACTIVATION_NAMES, GATE_OPTIONS
from norga.config.loading import parse_yaml


def cli(capsys, *argv: str):
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- config mistakes before torch -----------------------------------------------------------------
def test_gate_mistakes_are_reported_before_torch_is_imported():
    code = ("import sys\nfrom norga.commands.cli import main\n"
            f"rc = main(['train', '--config', {str(SMOKE)!r}, '--set', 'method.gate.name=norgaa'])\n"
            "rc2 = main(['train', '--config', " + repr(str(SMOKE)) + ", '--set', 'method.gate.activation=relu'])\n"
            "print(rc, rc2, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    assert done.stdout.split() == ["2", "2", "False"], done.stderr
    lines = error_lines(done.stderr)
    assert "method.gate.name: unknown gate 'norgaa'; choose one of ['linear', 'norga', 'norga_headwise']" in lines[0]
    assert "method.gate.activation: 'relu' is not one of ['tanh', 'sigmoid', 'gelu']" in lines[1]


def test_every_gate_has_its_options_registered_torch_free():
    from norga.gates.modules import ACTIVATIONS, GATES

    assert {"linear", "norga", "norga_headwise"} <= set(GATES) and set(GATES) <= set(GATE_OPTIONS)
    assert all(GATES[name].Options is GATE_OPTIONS[name] for name in GATES)
    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES


def test_only_true_and_false_are_booleans():
    assert parse_yaml("a: yes\nb: off\nc: true\nd: False\ne: on") == {"a": "yes", "b": "off", "c": True, "d": False,
                                                                        "e": "on"}
    with pytest.raises(ConfigError, match="eval_mask_unseen: expected true or false, got 'yes' .*YAML 1.1"):
        load_config(SMOKE, ["eval_mask_unseen=yes"])
    assert load_config(SMOKE, ["eval_mask_unseen=false"]).eval_mask_unseen is False
    assert load_config(SMOKE, ["amp=off"]).amp == "off"


def test_path_problems_are_reported_together_and_name_their_keys(tmp_path, capsys):
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--output-dir", str(tmp_path / "run"),
                         "--set", "model.checkpoint=missing.pt", "--set", "data.root=nowhere")
    line = assert_one_line_error(status, err, "2 problems", "(1) model.checkpoint: missing.pt not found",
                                 "(2) data.root: nowhere does not exist")
    assert "relative paths start at" in line and not (tmp_path / "run").exists()


# ---- the dry run reads every image ---------------------------------------------------------------
def _imagenet_r(root: Path, broken: int) -> Path:
    """ROOT/imagenet-r with 4 classes x 5 images, the first ``broken`` files (in sorted order) holding text."""
    files = [root / "imagenet-r" / f"n0{c}" / f"{i}.jpg" for c in range(4) for i in range(5)]
    for k, path in enumerate(files):
        path.parent.mkdir(parents=True, exist_ok=True)
        if k < broken:
            path.write_text("junk")
        else:
            Image.fromarray(np.full((8, 8, 3), 40 * (k % 6), np.uint8)).save(path, format="JPEG")
    return root


IMAGENET_R = ["--set", "data.name=imagenet_r", "--set", "data.num_tasks=2", "--set", "data.classes_per_task=2",
              "--set", "data.options={num_classes: 4}", "--set", "data.image_size=32"]


@pytest.mark.parametrize("broken", [20, 3])
def test_dry_run_lists_every_unreadable_image_at_once(broken, tmp_path, capsys):
    root = _imagenet_r(tmp_path / "data", broken)
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--set", f"data.root={root}", *IMAGENET_R,
                         "--dry-run")
    assert_one_line_error(status, err, f"{broken} of the 20 image files cannot be decoded", "replace or delete them")
    listed = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("unreadable image:")]
    assert len(listed) == broken and all("UnidentifiedImageError" in line for line in listed)


def test_dry_run_reports_data_and_weight_problems_together(tmp_path, capsys):
    root = _imagenet_r(tmp_path / "data", 2)
    bad_weights = tmp_path / "weights.pt"
    bad_weights.write_bytes(b"not a checkpoint")
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--set", f"data.root={root}", *IMAGENET_R,
                         "--set", f"model.checkpoint={bad_weights}", "--dry-run", "quick")
    assert_one_line_error(status, err, "the dry run found 2 problems", "(1) cannot read checkpoint",
                          "(2) 2 of the 20 image files cannot be decoded")


def test_dry_run_of_good_images_says_how_many_it_decoded(tmp_path, capsys):
    root = _imagenet_r(tmp_path / "data", 0)
    status, out, err = cli(capsys, "train", "--config", str(SMOKE), "--set", f"data.root={root}", *IMAGENET_R,
                           "--dry-run")
    assert status == 0, err
    assert "images: decoded the 20 image files: OK" in out


def test_a_sample_is_seeded_and_a_truncated_image_is_found(tmp_path):
    from norga.data.readability import unreadable_images

    paths = []
    for k in range(10):
        path = tmp_path / f"{k}.png"
        Image.fromarray(np.full((16, 16, 3), k, np.uint8)).save(path)
        paths.append(str(path))
    whole = Path(paths[4]).read_bytes()
    Path(paths[4]).write_bytes(whole[: len(whole) // 2])  # a truncated PNG: opens, fails when decoded
    checked, bad = unreadable_images(paths, progress=False)
    assert checked == 10 and [p for p, _ in bad] == [paths[4]]
    first = unreadable_images(paths, sample=3, seed=1, progress=False)
    assert first == unreadable_images(paths, sample=3, seed=1, progress=False) and first[0] == 3


# ---- environment ------------------------------------------------------------------------------------
def test_version_rules_name_the_matching_torchvision():
    from norga.commands.environment import version_problems

    assert version_problems({"torch": "2.5.1", "torchvision": "0.20.1", "timm": "1.0"}) == []
    [mixed] = version_problems({"torch": "2.5.1+cpu", "torchvision": "0.20.1", "timm": "1.0"})
    assert "different builds (cpu vs default)" in mixed
    assert "'torchvision==0.20.*' --index-url https://download.pytorch.org/whl/cpu" in mixed
    [old] = version_problems({"torch": "2.5.1+cu124", "torchvision": "0.19.0+cu124", "timm": "1.0"})
    assert "needs 0.20.*" in old and "whl/cu124" in old
    [missing] = version_problems({"torch": "2.5.1", "torchvision": None, "timm": None})
    assert missing.startswith("torchvision, timm not installed")


def test_a_broken_torchvision_is_one_line_naming_the_fix(monkeypatch, tmp_path, capsys):
    from norga.commands import environment

    real = importlib.import_module

    def broken(name, *args, **kwargs):
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(environment.importlib, "import_module", broken)
    monkeypatch.setattr(environment, "installed_versions",
                        lambda: {"torch": "2.5.1+cpu", "torchvision": "0.20.1", "timm": "1.0.9"})
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--output-dir", str(tmp_path / "run"))
    assert_one_line_error(status, err, "import torchvision fails (RuntimeError: operator torchvision::nms does not "
                          "exist)", "--index-url https://download.pytorch.org/whl/cpu", "different builds")
    assert not (tmp_path / "run").exists()


def test_doctor_reports_versions_devices_and_a_configs_problems(tmp_path, capsys):
    import torch

    status, out, err = cli(capsys, "doctor", "--config", str(SMOKE))
    assert status == 0, err
    assert f"torch {importlib.metadata.version('torch')}" in out and "CUDA:" in out and "ok: norga can run here" in out
    if torch.cuda.is_available():
        pytest.skip("the device check below needs a machine without CUDA")
    status, out, err = cli(capsys, "doctor", "--config", str(SMOKE), "--set", "device=cuda",
                           "--set", "data.root=nowhere")
    assert status == 2 and "ok:" not in out
    lines = error_lines(err)
    assert len(lines) == 2 and "data.root: nowhere does not exist" in lines[0] and "CUDA is not available" in lines[1]


def test_a_folder_named_norga_beside_a_script_does_not_break_a_run(tmp_path):
    (tmp_path / "norga").symlink_to(REPO, target_is_directory=True)  # a checkout folder named norga
    script = tmp_path / "example.py"
    script.write_text("from norga.engine.run_folder import code_version\nprint(code_version()['version'])\n")
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    from norga import __version__

    assert done.returncode == 0 and done.stdout.strip() == __version__, done.stderr[-2000:]


def test_an_error_starts_on_its_own_line_after_a_progress_bar(capsys):
    from tqdm import tqdm

    from norga.commands.cli import guarded
    from norga.errors import NorgaError

    bar = tqdm(total=10, desc="WTP", leave=False)
    bar.update(3)
    assert not bar.disable  # open

    def fail() -> int:
        raise NorgaError("something the user can fix")

    assert guarded(fail, lambda: "") == 2
    assert bar.disable  # closed (tqdm disables a closed bar) before the message was printed
    err = capsys.readouterr().err
    assert "WTP" in err and err.endswith("\rerror: something the user can fix\n")


def test_a_run_reports_its_weights_and_data_problems_together(tmp_path, capsys):
    bad_weights = tmp_path / "weights.pt"
    bad_weights.write_bytes(b"not a checkpoint")
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--output-dir", str(tmp_path / "run"),
                         "--set", f"model.checkpoint={bad_weights}", "--set", "data.options={num_classes: 0}")
    assert_one_line_error(status, err, "2 problems: (1) cannot read checkpoint",
                          "(2) synthetic dataset: data.options ['num_classes=0'] too small")
    assert not (tmp_path / "run").exists()
