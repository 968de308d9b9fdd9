"""norga export --push against a local stand-in of the Hub's HTTP API (tests/hub_stub.py), through the real
huggingface_hub client: every exported file arrives byte for byte under the token; failures are one line."""
from __future__ import annotations

import pytest

from conftest import shared_smoke_run
from hub_stub import HubStub
from norga.commands.cli import main as norga
from test_contract import smoke_config

pytest.importorskip("huggingface_hub")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return shared_smoke_run(tmp_path_factory, smoke_config("simplecil"))[1]  # read only: exports write elsewhere


@pytest.fixture
def hub(monkeypatch, tmp_path):
    stub = HubStub.start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", stub.url, raising=False)
    yield stub
    stub.stop()


def test_push_uploads_every_exported_file_with_the_token(run_folder, hub, tmp_path, capsys):
    out = tmp_path / "export"
    assert norga(["export", "--run", str(run_folder), "--out", str(out), "--push", "my-lab/norga-smoke"]) == 0
    assert hub.created == ["my-lab/norga-smoke"]
    local = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert hub.files["my-lab/norga-smoke"] == local and "state/task_00.safetensors" in local
    assert all(auth == "Bearer hf_test_token" for method, _, auth in hub.requests if method == "POST")
    assert f"{hub.url}/my-lab/norga-smoke/commit/" in capsys.readouterr().out


def test_a_refused_upload_is_one_line_and_the_export_stays(run_folder, hub, tmp_path, capsys):
    hub.fail_with = 403
    out = tmp_path / "export"
    assert norga(["export", "--run", str(run_folder), "--out", str(out), "--push", "my-lab/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--push to my-lab/x failed" in err[0] and f"hf upload my-lab/x {out} ." in err[0]
    assert (out / "README.md").is_file() and (out / "state" / "task_00.safetensors").is_file()


def test_offline_or_a_bad_repo_id_is_one_line(run_folder, hub, tmp_path, capsys, monkeypatch):
    assert norga(["export", "--run", str(run_folder), "--out", str(tmp_path / "a"), "--push", "no-slash"]) == 2
    assert "expected a Hugging Face model repo id ORG/NAME" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()  # checked before anything is written
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert norga(["export", "--run", str(run_folder), "--out", str(tmp_path / "b"), "--push", "org/name"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HF_HUB_OFFLINE is set" in err[0] and not hub.requests
