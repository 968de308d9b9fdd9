"""The GPU check on a bare box (issue #68): only torch, torchvision, timm and norga's hard runtime dependencies,
run from the checkout with PYTHONPATH (no install). matplotlib, scikit-learn, SciPy and TensorBoard are hidden by
a ``sitecustomize`` (:mod:`bench.gpu_check_barebox`); what needs one is skipped with the package named, not failed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import torch

from bench import gpu_check_barebox as barebox
from bench import gpu_check_env as env
from bench import gpu_check_prepare as prep
from bench import gpu_check_steps as steps
from bench.gpu_check import OUT_LIMIT_MIB

HIDDEN_DISTS = ("matplotlib", "scikit-learn", "scipy", "tensorboard")
PROBE = """
import importlib.util, json, sys
out = {"find_spec": {n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}, "import": {}}
for n in sys.argv[1:]:
    try:
        __import__(n + ".submodule" if n == "sklearn" else n)
        out["import"][n] = "imported"
    except ImportError as err:
        out["import"][n] = type(err).__name__
import norga, bench.gpu_check_env as env
out["norga"] = norga.__file__
out["packages"] = env.package_versions()
print(json.dumps(out))
"""


def test_the_sitecustomize_hides_the_optional_packages_from_a_child_process(tmp_path):
    site = barebox.write_site(tmp_path / "site")
    done = subprocess.run([sys.executable, "-c", PROBE, *barebox.HIDDEN], cwd=tmp_path, env=barebox.bare_env(site),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["find_spec"] == {n: False for n in barebox.HIDDEN}
    assert set(got["import"].values()) == {"ModuleNotFoundError"}
    assert got["norga"].startswith(str(prep.REPO / "norga"))  # from the checkout through PYTHONPATH
    assert all(got["packages"][d] is None for d in HIDDEN_DISTS)


@pytest.mark.slow
def test_tiny_check_on_a_bare_box_passes_with_the_optional_parts_skipped(tmp_path):
    """The whole --tiny check in the bare environment (~1-2 min on 2 cores: seven worker processes)."""
    site, out, scratch = barebox.write_site(tmp_path / "site"), tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    done = barebox.run(["--device", "cpu", "--tiny", "--budget-scale", "5", "--out", str(out)], site, timeout=900,
                       extra_env={"TMPDIR": str(scratch)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    s = json.loads((out / "gpu_check.json").read_text())
    assert s["passed"] is True and s["meta"]["provisional"] is False
    assert all(r["status"] == "ok" for r in s["steps"].values())
    found = s["steps"]["environment"]["result"]
    assert all(found["optional_packages"][d] is None for d in HIDDEN_DISTS)
    assert {"gcc", "cc"} <= set(found["compilers"]) and isinstance(found["python_headers"]["present"], bool)
    assert found["norga_path"] == str(prep.REPO / "norga")
    smoke = s["steps"]["smoke"]["result"]
    skipped = {k: r for k, r in smoke["runs"].items() if "skipped" in r}
    assert {k.split("/")[0] for k in skipped} == {"hidelora", "sprompt"}  # K-means: scikit-learn
    assert all("scikit-learn" in r["skipped"] and r["missing"] == "scikit-learn" for r in skipped.values())
    assert smoke["failed"] == [] and all("FA" in r for k, r in smoke["runs"].items() if k not in skipped)
    assert s["steps"]["small_task"]["result"]["off"]["FA_diff_points"] == 0.0
    assert prep.folder_bytes(out) < OUT_LIMIT_MIB * 2 ** 20
    assert not list(out.rglob("checkpoints")) and not list(scratch.iterdir())  # the scratch folder is gone
    md = (out / "gpu_check.md").read_text()
    assert "| hidelora | fp32 | skipped: needs scikit-learn" in md


def test_an_import_error_names_its_optional_package():
    assert env.optional_module_of(ModuleNotFoundError("x", name="sklearn.cluster")) == "scikit-learn"
    assert env.optional_module_of(ModuleNotFoundError("x", name="matplotlib")) == "matplotlib"
    assert env.optional_module_of(ModuleNotFoundError("x", name="norga.nothing")) is None
    assert env.optional_module_of(ImportError("no name")) is None


def test_compile_is_skipped_naming_the_missing_compiler_and_headers(tmp_path, monkeypatch):
    monkeypatch.setattr(env.shutil, "which", lambda name: None)
    monkeypatch.setattr(env, "python_headers", lambda: {"include": "/nowhere", "present": False})
    assert env.compile_missing(torch.device("cpu"), "eager") == []  # the --tiny path needs nothing
    missing = env.compile_missing(torch.device("cpu"), "inductor")
    assert missing == ["a C compiler (gcc/cc)", "the Python headers (Python.h)"]
    ctx = steps.Context(torch.device("cpu"), False, None, tmp_path, tmp_path, 0.0, 0.0)  # not tiny: Inductor
    with pytest.raises(env.StepSkipped, match=r"needs a C compiler \(gcc/cc\), the Python headers") as skip:
        steps.compiled(ctx, lambda key, value: None)
    assert skip.value.missing == missing


def test_the_environment_step_records_packages_compilers_and_headers(tmp_path):
    ctx = steps.Context(torch.device("cpu"), True, None, tmp_path, tmp_path, 0.0, 0.0)
    found = steps.environment(ctx, lambda key, value: None)
    assert set(found["optional_packages"]) == set(env.OPTIONAL_PACKAGES.values())
    assert set(found["compilers"]) == set(env.COMPILERS) and "include" in found["python_headers"]
    assert found["passed"] is True


def test_no_cuda_is_the_one_fatal_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ctx = steps.Context(torch.device("cuda"), False, None, tmp_path, tmp_path, 0.0, 0.0)
    with pytest.raises(steps.NoDevice, match="sees no CUDA device") as err:
        steps.environment(ctx, lambda key, value: None)
    assert err.value.fatal is True


def test_runs_skip_plots_without_importing_matplotlib_or_dropping_modules():
    name = "norga.reports.plots"
    before = sys.modules.get(name)
    with prep.without_plots():
        from norga.reports.plots import write_run_plots

        assert write_run_plots("anywhere") is None
        sys.modules["norga_test_imported_inside"] = types.ModuleType("norga_test_imported_inside")
    assert sys.modules.get(name) is before  # restored: the real module (or none)
    assert sys.modules.pop("norga_test_imported_inside")  # a module imported during a run stays imported
