"""norga export / norga eval --from: an export folder alone reproduces the run's accuracy matrices (every
registered method, trained once per method from its smoke config); its manifest lists every file; --out must be
new; --push without a token; a malformed state skeleton is one ExportError naming the file."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import shared_smoke_run
from norga.commands.cli import main as norga
from norga.config import method_configs
from norga.engine.export import ExportError, join_state, split_state
from test_contract import smoke_config

METHODS = sorted(method_configs())


@pytest.fixture(scope="module", params=METHODS)
def exported(request, tmp_path_factory):
    """(run folder, its metrics, export folder) of the method's smoke run (a copy of the shared one: a test here
    moves the run folder out of reach)."""
    root = tmp_path_factory.mktemp("export") / request.param
    _, shared, metrics = shared_smoke_run(tmp_path_factory, smoke_config(request.param))
    shutil.copytree(shared, root / "run")
    assert norga(["export", "--run", str(root / "run"), "--out", str(root / "export")]) == 0
    return root / "run", metrics, root / "export"


@pytest.mark.integration
def test_eval_from_an_export_gives_the_runs_accuracy_matrix(exported, tmp_path):
    run, metrics, export = exported
    moved = tmp_path / "moved"
    export.rename(moved)  # the run folder is not consulted: remove it from reach too
    run.rename(tmp_path / "run_elsewhere")
    try:
        assert norga(["eval", "--from", str(moved)]) == 0
        evaluated = json.loads((moved / "eval.json").read_text())
    finally:
        moved.rename(export), (tmp_path / "run_elsewhere").rename(run)
    for key in ("acc_matrix", "til_acc_matrix", "FA", "CA", "FM"):
        assert evaluated[key] == metrics[key], key


@pytest.mark.integration
def test_export_holds_tensors_config_metrics_and_card(exported):
    run, metrics, export = exported
    assert json.loads((export / "metrics.json").read_text())["acc_matrix"] == metrics["acc_matrix"]
    assert (export / "config.yaml").read_text().strip()
    tensors = load_file(str(export / "state" / f"task_{metrics['num_tasks'] - 1:02d}.safetensors"))
    assert tensors and all(isinstance(t, torch.Tensor) for t in tensors.values())
    card = (export / "README.md").read_text()
    assert f"{metrics['FA']:.4f}" in card and "norga eval --from" in card
    assert f"tasks trained | {metrics['num_tasks']} of {metrics['num_tasks']}" in card
    manifest = json.loads((export / "norga-export.json").read_text())  # written last: every other file listed
    present = {p.relative_to(export).as_posix() for p in export.rglob("*") if p.is_file()}
    assert manifest["complete"] is True and set(manifest["files"]) == present - {"norga-export.json", "eval.json"}


@pytest.mark.integration
def test_export_refuses_a_non_empty_out_and_push_without_token_is_one_line(exported, tmp_path, capsys,
                                                                          monkeypatch):
    run, _, export = exported
    assert norga(["export", "--run", str(run), "--out", str(export)]) == 2
    assert "--out" in capsys.readouterr().err
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored token
    assert norga(["export", "--run", str(run), "--out", str(tmp_path / "e"), "--push", "org/name"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HF_TOKEN" in err[0] and "huggingface-cli login" in err[0]


def test_state_split_and_join_round_trip():
    state = {"a": torch.ones(2), 3: [torch.zeros(1, 2), (1, "x", None)], "n": {"m": 0.5, "t": torch.arange(3)}}
    tensors = {}
    back = join_state(json.loads(json.dumps(split_state(state, tensors))), tensors)
    assert back.keys() == state.keys() and back[3][1] == (1, "x", None) and back["n"]["m"] == 0.5
    assert torch.equal(back["a"], state["a"]) and torch.equal(back["n"]["t"], state["n"]["t"])


@pytest.mark.parametrize("skeleton", [{"__tensor__": "t9"}, {"__dict__": [[1]]}, {"__tensor__": "t0", "x": 1},
                                      {"__set__": []}, {"__dict__": [[[1], 2]]}])
def test_a_malformed_state_skeleton_is_an_export_error_naming_the_file(skeleton):
    with pytest.raises(ExportError, match="state/task_00.json"):
        join_state(skeleton, {"t0": torch.ones(1)}, "state/task_00.json")
