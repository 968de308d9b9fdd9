"""Exports verify themselves (issue #66): the manifest norga-export.json lists the sha256 of every file; eval --from
and export --push refuse a modified, truncated, missing, extra or malformed file with one line naming it; config.yaml
is checked against the config hash each state records; eval --from --output never replaces a file it does not own;
export refuses a run missing a checkpoint, removes what it wrote when it fails, and its card names a mixed config.

One short smoke run (tests/conftest.py SHORT_SMOKE) is trained and exported once for the module; each test works
on copies."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file

from conftest import SHORT_SMOKE, SMOKE
from norga.commands.cli import main as norga
from norga.engine.export import ExportError, push_export
from norga.engine.provenance import config_hash

MARKER = "norga-export.json"
SETS = [arg for kv in SHORT_SMOKE for arg in ("--set", kv)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> dict:
    """{relative path: sha256} of every file under root (names and bytes: any change shows)."""
    return {p.relative_to(root).as_posix(): sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


def cli(capsys, *argv) -> tuple:
    """(exit status, stderr lines) of ``norga argv``."""
    rc = norga([str(a) for a in argv])
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """A folder holding the short smoke run ``run`` and its export ``exp`` (read only: tests copy them)."""
    root = tmp_path_factory.mktemp("integrity")
    assert norga(["train", "--config", str(SMOKE), "--output-dir", str(root / "run"), *SETS]) == 0
    assert norga(["export", "--run", str(root / "run"), "--out", str(root / "exp")]) == 0
    return root


@pytest.fixture
def copy(smoke, tmp_path):
    """tmp_path with copies of the run (``run``) and its export (``exp``)."""
    for name in ("run", "exp"):
        shutil.copytree(smoke / name, tmp_path / name)
    return tmp_path


def rehash(exp: Path, **changes) -> None:
    """Rewrite the manifest's sha256s to the files' current bytes (and ``changes``): an edit that also rewrote
    the manifest, so that the checks behind the sha256 are reached."""
    manifest = json.loads((exp / MARKER).read_text())
    manifest["files"] = {name: sha(exp / name) for name in manifest["files"] if (exp / name).is_file()}
    manifest.update(changes)
    (exp / MARKER).write_text(json.dumps(manifest))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def zero_tensors(exp: Path) -> None:
    path = exp / "state" / "task_01.safetensors"
    save_file({k: v * 0 for k, v in load_file(str(path)).items()}, str(path))


def edit_seed(exp: Path) -> None:
    edit(exp / "config.yaml", "seed: 0\n", "seed: 7\n")


def edit_seed_and_manifest(exp: Path) -> None:
    edit_seed(exp)
    rehash(exp, config_hash=config_hash(yaml.safe_load((exp / "config.yaml").read_text())))


def truncate(name: str, rehashed: bool):
    def corrupt(exp: Path) -> None:
        data = (exp / name).read_bytes()
        (exp / name).write_bytes(data[: len(data) // 2])
        if rehashed:
            rehash(exp)
    return corrupt


def edited(name: str, old: str, new: str):
    def corrupt(exp: Path) -> None:
        edit(exp / name, old, new)
        rehash(exp)
    return corrupt


def manifest_set(**changes):
    def corrupt(exp: Path) -> None:
        manifest = json.loads((exp / MARKER).read_text())
        manifest.update(changes)
        (exp / MARKER).write_text(json.dumps(manifest))
    return corrupt


# case -> (corruption of the export, words the one error line must hold)
CASES = {
    "head tensors overwritten": (zero_tensors, ["state/task_01.safetensors", "sha256", "norga export"]),
    "seed edited": (edit_seed, ["config.yaml", "sha256"]),
    "seed edited, manifest rewritten": (edit_seed_and_manifest, ["config.yaml", "task 0", "config hash"]),
    "state deleted": (lambda e: (e / "state" / "task_01.safetensors").unlink(), ["task_01.safetensors", "missing"]),
    "extra state": (lambda e: shutil.copy(e / "state" / "task_01.json", e / "state" / "task_02.json"),
                    ["state/task_02.json", "not one of the export's files"]),
    "truncated safetensors": (truncate("state/task_01.safetensors", False), ["task_01.safetensors", "sha256"]),
    "truncated safetensors, manifest rewritten": (truncate("state/task_01.safetensors", True),
                                                  ["task_01.safetensors", "not a readable safetensors"]),
    "broken state JSON": (truncate("state/task_00.json", True), ["state/task_00.json", "not valid JSON"]),
    "broken metrics.json": (truncate("metrics.json", True), ["metrics.json", "not valid JSON"]),
    "broken manifest": (truncate(MARKER, False), [MARKER, "not valid JSON"]),
    "unknown key in a state JSON": (edited("state/task_00.json", '"task": 0,', '"task": 0, "extra": 1,'),
                                    ["state/task_00.json", "unknown key 'extra'"]),
    "unknown entry in a state JSON": (edited("state/task_00.json", '{"__tensor__": "t0"}',
                                             '{"__tensor__": "t0", "x": 1}'), ["state/task_00.json", "unknown entry"]),
    "missing tensor key": (edited("state/task_00.json", '"t0"', '"t999"'), ["state/task_00.json", "'t999'"]),
    "unused tensor": (edited("state/task_00.json", '{"__tensor__": "t0"}', "0"), ["task_00.safetensors", "t0"]),
    "metrics count edited": (edited("metrics.json", '"completed_tasks": 2', '"completed_tasks": 1'),
                             ["metrics.json", "2 task(s)"]),
    "unfinished export": (manifest_set(complete=False), ["unfinished export", "norga export"]),
    "manifest deleted": (lambda e: (e / MARKER).unlink(), [MARKER, "older norga"]),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(CASES))
def test_eval_from_a_damaged_export_is_one_line_naming_the_file(copy, capsys, case):
    corrupt, words = CASES[case]
    exp = copy / "exp"
    corrupt(exp)
    before = tree(copy)
    rc, err = cli(capsys, "eval", "--from", exp)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert all(word in err[0] for word in words), (words, err[0])
    assert tree(copy) == before  # nothing written (no eval.json)


@pytest.mark.integration
def test_manifest_lists_every_file_with_its_sha256_and_states_record_config_hashes(smoke):
    import torch

    exp, run = smoke / "exp", smoke / "run"
    manifest = json.loads((exp / MARKER).read_text())
    assert manifest["complete"] is True and manifest["tasks"] == 2
    assert manifest["files"] == {k: v for k, v in tree(exp).items() if k != MARKER}
    config = yaml.safe_load((exp / "config.yaml").read_text())
    assert manifest["config_hash"] == config_hash(config)
    for t in range(2):
        saved = torch.load(run / "checkpoints" / f"task_{t:02d}.pt", map_location="cpu", weights_only=True)
        state = json.loads((exp / "state" / f"task_{t:02d}.json").read_text())
        assert state["config_hash"] == saved["run"]["config_hash"] and state["task"] == t


@pytest.mark.integration
def test_eval_from_twice_writes_only_eval_json(copy, capsys):
    exp = copy / "exp"
    metrics = json.loads((copy / "run" / "metrics.json").read_text())
    before = tree(exp)
    for _ in range(2):  # the second run verifies an export that now holds eval.json
        rc, err = cli(capsys, "eval", "--from", exp)
        assert rc == 0, err
    evaluated = json.loads((exp / "eval.json").read_text())
    assert evaluated["acc_matrix"] == metrics["acc_matrix"] and evaluated["FA"] == metrics["FA"]
    after = tree(exp)
    assert set(after) - set(before) == {"eval.json"} and all(after[k] == v for k, v in before.items())


OUTPUTS = ["notes.txt", "run/metrics.json", "run/checkpoints/task_01.pt", "exp/README.md", "exp/config.yaml",
           "exp/state/task_00.json", "exp/state/eval.json", "run/eval2.json"]


@pytest.mark.integration
@pytest.mark.parametrize("target", OUTPUTS)
def test_eval_from_output_never_replaces_a_file_it_does_not_own(copy, capsys, target):
    (copy / "notes.txt").write_text("my notes\n")
    before = tree(copy)
    rc, err = cli(capsys, "eval", "--from", copy / "exp", "--output", copy / target)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "--output" in err[0], err
    assert tree(copy) == before


@pytest.mark.integration
def test_export_of_a_run_missing_its_last_checkpoint_is_refused(copy, capsys):
    for name in ("task_01.pt", "task_01.pt.sha256"):
        (copy / "run" / "checkpoints" / name).unlink()
    rc, err = cli(capsys, "export", "--run", copy / "run", "--out", copy / "new")
    assert rc == 2 and len(err) == 1 and "task_01.pt" in err[0], err
    assert not (copy / "new").exists()


@pytest.mark.integration
@pytest.mark.parametrize("target", ["run/exp", "run/checkpoints/exp", "exp/again", "exp"])
def test_export_out_inside_a_run_or_an_export_is_refused(copy, capsys, target):
    before = tree(copy)
    rc, err = cli(capsys, "export", "--run", copy / "run", "--out", copy / target)
    assert rc == 2 and len(err) == 1 and "--out" in err[0], err
    assert tree(copy) == before and not (copy / target / MARKER).is_file() or target == "exp"


@pytest.mark.integration
@pytest.mark.parametrize("stop", [ExportError("disk says no"), KeyboardInterrupt()])
@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_export_leaves_nothing_behind(copy, capsys, monkeypatch, stop, existing):
    def fail(*args, **kwargs):
        raise stop
    monkeypatch.setattr("norga.engine.export.model_card", fail)  # after the states and config.yaml are written
    out = copy / "deep" / "new"
    if existing:
        out.mkdir(parents=True)
    rc, err = cli(capsys, "export", "--run", copy / "run", "--out", out)
    assert rc == (130 if isinstance(stop, KeyboardInterrupt) else 2) and len(err) == 1, err
    assert (out.is_dir() and not any(out.iterdir())) if existing else not (copy / "deep").exists()


@pytest.mark.integration
def test_push_verifies_the_export_and_uploads_only_its_files(copy, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    calls = []

    class FakeApi:
        def create_repo(self, repo, **kwargs):
            calls.append(("create", repo))

        def upload_folder(self, **kwargs):
            calls.append(("upload", sorted(kwargs["allow_patterns"])))
            return "https://hub.example/commit/1"
    monkeypatch.setattr(hub, "HfApi", FakeApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    exp = copy / "exp"
    (exp / "eval.json").write_text("{}\n")
    assert push_export(exp, "org/name") == "https://hub.example/commit/1"
    assert calls == [("create", "org/name"), ("upload", sorted(set(tree(exp)) - {"eval.json"}))]
    zero_tensors(exp)
    with pytest.raises(ExportError, match="task_01.safetensors"):
        push_export(exp, "org/name")
    assert len(calls) == 2  # nothing uploaded


@pytest.mark.integration
def test_mixed_config_export_says_so_and_needs_the_mixed_flag(copy, capsys):
    run = copy / "run"
    for name in ("task_01.pt", "task_01.pt.sha256"):
        (run / "checkpoints" / name).unlink()
    assert norga(["train", "--config", str(SMOKE), "--output-dir", str(run), *SETS, "--set", "method.tap.epochs=2",
                  "--force"]) == 0
    rc, err = cli(capsys, "export", "--run", run, "--out", copy / "mixed")
    assert rc == 0, err
    card = (copy / "mixed" / "README.md").read_text()
    assert "mixed config" in card and "method.tap.epochs: 1 -> 2" in card and "tasks trained | 2 of 2" in card
    metrics = json.loads((copy / "mixed" / "metrics.json").read_text())
    assert metrics["mixed_config"] is True
    edited("metrics.json", '"mixed_config": true', '"mixed_config": false')(copy / "mixed")
    rc, err = cli(capsys, "eval", "--from", copy / "mixed")
    assert rc == 2 and len(err) == 1 and "config.yaml is not the config task 0 was trained with" in err[0], err
