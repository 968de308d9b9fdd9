"""Every cross-check runs in CI: each ``crosscheck/<method>/`` folder (found from the folder listing) imports,
names registered methods, covers every method docs/crosscheck.md calls checked, and its norga side runs end to end
on the CI-sized stand-in for ``../shared`` (crosscheck/harness/ci_task.py: a random ViT-S/14 of the same timm
architecture cut to 5 blocks, synthetic images), so a refactor of a method that breaks its check fails here. The
reference sides need the reference checkouts and their environments, which CI does not have: they skip, saying so.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

from crosscheck.harness.ci_task import make_shared
from norga.methods import METHOD_MODULES

REPO = Path(__file__).resolve().parents[1]
CROSSCHECK = REPO / "crosscheck"
SHARED_FOLDERS = ("harness", "speed")  # not a method's check: what the checks share, the speed report
METHOD_FOLDERS = sorted(p.name for p in CROSSCHECK.iterdir()
                        if (p / "__init__.py").is_file() and p.name not in SHARED_FOLDERS)


def folder_methods(folder: str) -> tuple:
    return importlib.import_module(f"crosscheck.{folder}").METHODS


def documented_as_checked() -> set:
    """The methods of docs/crosscheck.md's summary tables (the rows under a "| method | reference code" header, first
    cell `name` or [`name`](page)), except a row without a cross-check page that sends the reader to the fidelity
    page (``hideprompt``: checked there)."""
    names, in_table = set(), False
    for line in (REPO / "docs" / "crosscheck.md").read_text().splitlines():
        in_table = line.startswith("| method | reference code") or (in_table and line.startswith("|"))
        m = re.match(r"\| \[?`(\w+)`", line) if in_table else None
        first = line.split("|")[1] if m else ""
        if m and ("crosscheck/" in first or "(fidelity.md)" not in line):
            names.add(m.group(1))
    return names


@pytest.fixture(scope="module")
def ci_shared(tmp_path_factory) -> Path:
    return make_shared(tmp_path_factory.mktemp("ci_shared"))


@pytest.fixture
def isolated_torch():
    """A side sets torch's thread count and global seed; the next test in this worker gets them back."""
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        yield
    torch.set_num_threads(threads)


def test_every_checked_method_has_its_folder():
    assert len(METHOD_FOLDERS) >= 12, METHOD_FOLDERS
    covered = {m for folder in METHOD_FOLDERS for m in folder_methods(folder)}
    unknown = covered - set(METHOD_MODULES)
    assert not unknown, f"crosscheck folders name methods the registry does not have: {sorted(unknown)}"
    documented = documented_as_checked()
    assert {"l2p", "coda", "tuna", "sd_lora"} <= documented, "the summary tables were not read"
    missing = documented - covered
    assert not missing, f"docs/crosscheck.md calls {sorted(missing)} checked but no crosscheck/<folder> names them"


@pytest.mark.parametrize("folder", METHOD_FOLDERS)
def test_a_method_folder_has_both_sides_and_its_readme(folder):
    files = {p.name for p in (CROSSCHECK / folder).iterdir()}
    assert {"norga_side.py", "reference_side.py", "README.md", "__init__.py"} <= files, sorted(files)
    assert folder_methods(folder), f"crosscheck/{folder}/__init__.py declares no METHODS"


@pytest.mark.parametrize("folder", [*METHOD_FOLDERS, *SHARED_FOLDERS])
def test_every_module_of_a_folder_imports(folder):
    """Reference-side modules import the reference code only when run, so all of them import here."""
    for path in sorted((CROSSCHECK / folder).glob("*.py")):
        importlib.import_module(f"crosscheck.{folder}.{path.stem}")


@pytest.mark.parametrize("folder", METHOD_FOLDERS)
def test_the_norga_side_runs_on_the_ci_task(folder, ci_shared, tmp_path, isolated_torch):
    side = importlib.import_module(f"crosscheck.{folder}.norga_side")
    assert side.main(["--shared", str(ci_shared), "--out", str(tmp_path)]) == 0
    written = sorted(tmp_path.glob("*.pt"))
    assert written, f"crosscheck.{folder}.norga_side wrote no .pt file"
    for path in written:
        saved = torch.load(path, weights_only=False)
        assert isinstance(saved, dict) and saved, f"{path.name} holds nothing"
        assert any(isinstance(v, (torch.Tensor, dict, list)) for v in saved.values()), f"{path.name} has no tensors"


@pytest.mark.parametrize("folder", METHOD_FOLDERS)
def test_the_reference_side_needs_its_checkout(folder):
    title = (CROSSCHECK / folder / "README.md").read_text().splitlines()[0].lstrip("# ")
    pytest.skip(f"needs the reference checkout and its environment ({title}): python -m "
                f"crosscheck.{folder}.reference_side --ref CHECKOUT --saved DIR, see crosscheck/{folder}/README.md")


def test_a_broken_norga_side_fails(ci_shared, tmp_path, monkeypatch, isolated_torch):
    """The run above can fail: a side whose method lost what the check drives raises here."""
    from norga.methods.coda import CODAPrompt

    monkeypatch.delattr(CODAPrompt, "draw_orthonormal")
    side = importlib.import_module("crosscheck.coda.norga_side")
    with pytest.raises(AttributeError, match="draw_orthonormal"):
        side.main(["--shared", str(ci_shared), "--out", str(tmp_path)])
