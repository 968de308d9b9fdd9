"""The GPU check (``python -m bench.gpu_check``) on the CPU: the --tiny run through every step, --prepare on a
stand-in source (checksums, size accounting), the per-step budget, and (opt-in) --prepare from ../shared."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import gpu_check, gpu_check_prepare as prep
from bench.gpu_check_attention import backend_of
from bench.gpu_check_steps import ENTRY_TOLERANCE, FA_TOLERANCE, compare
from bench.gpu_check_timing import PASSES
from norga.config import method_configs
from norga.files import sha256_file


def summary(out: Path) -> dict:
    return json.loads((out / "gpu_check.json").read_text())


@pytest.mark.integration
def test_tiny_check_on_the_cpu_runs_every_step(tmp_path, capfd):
    out = tmp_path / "check"
    # the budgets are an H200's and an idle 2-core CPU's; a test shares its cores, so it is not a timing test
    assert gpu_check.main(["--device", "cpu", "--tiny", "--budget-scale", "10", "--out", str(out)]) == 0
    s = summary(out)
    assert s["passed"] is True and list(s["steps"]) == list(gpu_check.STEPS)
    assert all(r["status"] == "ok" for r in s["steps"].values())
    smoke = s["steps"]["smoke"]["result"]["runs"]
    assert set(smoke) == {f"{m}/{amp}" for m in method_configs() for amp in ("off", "bf16")}
    assert all(0.0 <= r["FA"] <= 1.0 for r in smoke.values())
    attention = s["steps"]["attention"]["result"]
    assert attention["augmented_head_dim"] % 8 == 0 and attention["passed"] is None
    assert all(d["prefix_profiled"]["backends"] for d in attention["dtypes"].values())  # the CPU names its kernel
    small = s["steps"]["small_task"]["result"]
    assert small["off"]["within"] and small["off"]["FA_diff_points"] == 0.0  # the same device: the same run
    assert set(s["steps"]["timing"]["result"]["passes"]) == {f"{m}/{p}" for m in ("eager", "compiled") for p in PASSES}
    assert not (out / "gpu_check" / "gpu_rates.json").exists() and not (out / "gpu_rates.json").exists()  # CPU
    text = (out / "gpu_check.md").read_text()
    assert "## Timing" in text and "| norga | bf16 |" in text
    printed = capfd.readouterr().out
    assert "[gpu_check] smoke norga" in printed  # the worker prints progress as it goes


def test_a_step_over_its_budget_is_stopped_and_the_next_skipped_with_reasons(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_check.BUDGETS, "timing", (1, 1))  # the tiny timing needs several seconds
    monkeypatch.setattr(gpu_check, "START_UP_S", 0.0)
    data = prep.make_tiny_folder(tmp_path / "data")
    out = tmp_path / "check"
    code = gpu_check.main(["--device", "cpu", "--tiny", "--data", str(data), "--out", str(out), "--steps",
                           "environment", "timing", "smoke", "--total-budget", "50"])
    s = summary(out)
    assert code == 1 and s["passed"] is False
    assert s["steps"]["environment"]["status"] == "ok"
    timing = s["steps"]["timing"]
    assert timing["status"] == "timeout" and "budget 1 s" in timing["reason"]
    smoke = s["steps"]["smoke"]  # its budget (120 s with --tiny) does not fit in the 50 s: skipped, with the reason
    assert smoke["status"] == "skipped" and "of the check's 50 s were left" in smoke["reason"]
    assert "**timeout**" in (out / "gpu_check.md").read_text()


def test_prepare_on_a_stand_in_source_checksums_and_size(tmp_path):
    source = prep.make_tiny_source(tmp_path / "shared")
    folder = tmp_path / "prepared"
    assert gpu_check.main(["--prepare", str(folder), "--shared", str(source), "--tiny"]) == 0
    manifest = json.loads((folder / prep.MANIFEST).read_text())
    assert set(manifest["files"]) == set(prep.LISTED)
    for name, f in manifest["files"].items():
        assert f["sha256"] == sha256_file(folder / name) and f["bytes"] == (folder / name).stat().st_size
    assert manifest["total_bytes"] == sum(f["bytes"] for f in manifest["files"].values())
    assert prep.folder_bytes(folder) == manifest["total_bytes"] + (folder / prep.MANIFEST).stat().st_size
    reference = prep.read_reference(folder)
    assert set(reference["smoke_FA"]) == set(method_configs())
    assert len(reference["acc_matrix"]) == 5 and reference["device"] == "cpu"
    prep.verify(folder)
    with open(folder / prep.DATA, "r+b") as f:  # one altered byte: the check refuses the folder
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(prep.PreparedFolderError, match="data.npz"):
        prep.verify(folder)
    assert gpu_check.main(["--device", "cpu", "--tiny", "--data", str(folder), "--out", str(tmp_path / "c")]) == 2


def test_size_over_the_limit_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "f"
    folder.mkdir()
    for name in prep.LISTED:
        (folder / name).write_bytes(b"x" * 1000)
    monkeypatch.setattr(prep, "LIMIT_BYTES", 3000)
    with pytest.raises(prep.PreparedFolderError, match="over the 0 MiB limit"):
        prep.write_manifest(folder, {})


def test_a_folder_git_would_track_is_refused():
    with pytest.raises(prep.PreparedFolderError, match="not git-ignored"):
        prep.check_ignored(prep.REPO / "bench" / "gpu_check_data")
    prep.check_ignored(prep.REPO / "runs" / "gpu_check_data")  # runs/ is ignored


def test_accuracy_comparison_and_backend_names():
    reference = {"acc_matrix": [[0.5, 0.4], [None, 0.6]], "FA": 0.5}
    near = compare(reference, {"acc_matrix": [[0.52, 0.41], [None, 0.6]], "FA": 0.505, "seconds": 1}, "off")
    assert near["within"] and near["max_entry_diff_points"] == pytest.approx(2.0)
    far = compare(reference, {"acc_matrix": [[0.5, 0.4 - (ENTRY_TOLERANCE + 1) / 100], [None, 0.6]], "FA": 0.5,
                              "seconds": 1}, "off")
    assert not far["within"]
    low = compare(reference, {**reference, "FA": 0.5 - (FA_TOLERANCE["bf16"] + 0.5) / 100, "seconds": 1}, "bf16")
    assert not low["within"] and low["FA_diff_points"] < 0
    assert backend_of(["void pytorch_flash::flash_fwd_kernel<...>", "fmha_cutlassF_bf16_aligned_64x64",
                       "aten::_scaled_dot_product_attention_math"]) == ["flash", "math", "memory-efficient"]
    assert backend_of(["aten::_scaled_dot_product_flash_attention_for_cpu"]) == ["cpu-flash"]


@pytest.mark.slow
def test_prepare_from_shared_fits_the_limit(shared_dir, tmp_path):
    """Opt-in, NORGA_PREPARE_TEST=1 (5-30 minutes: the CPU reference run of NoRGa on the small task): the real
    folder is under 60 MiB."""
    if not os.environ.get("NORGA_PREPARE_TEST"):
        pytest.skip("opt-in: set NORGA_PREPARE_TEST=1 (runs NoRGa on the small task on the CPU, 5-30 minutes)")
    folder = tmp_path / "gpu_check_data"
    manifest = prep.prepare_from_shared(folder, shared_dir)
    assert prep.folder_bytes(folder) <= prep.LIMIT_BYTES
    assert prep.verify(folder) == manifest
    reference = prep.read_reference(folder)
    assert len(reference["acc_matrix"]) == 5 and reference["FA"] > 0.1  # 50 classes: chance is 0.02
