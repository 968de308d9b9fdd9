"""End-to-end pipeline on the smoke config: files, metrics, freezing, determinism, resume, learning."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from faults import ENV, assert_same_metrics
from conftest import REPO_ROOT, SMOKE
from norga.config import load_config
from norga.engine.evaluate import evaluate_task
from norga.engine.run_folder import RunDir
from norga.data import DataError
from norga.errors import NorgaError

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")


def train(out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO_ROOT / "train.py"), "--config", str(SMOKE), "--output-dir", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=REPO_ROOT)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "smoke"
    result = train(out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_smoke_run_writes_every_file_and_consistent_metrics(smoke_run):
    for name in ("config.yaml", "metrics.json", "acc_matrix.csv", "log.txt"):
        assert (smoke_run / name).is_file(), name
    assert sorted(p.name for p in (smoke_run / "checkpoints").glob("*.pt")) == [f"task_0{i}.pt" for i in range(3)]
    assert sorted(p.name for p in (smoke_run / "checkpoints").glob("*.sha256")) == [
        f"task_0{i}.pt.sha256" for i in range(3)]
    m = json.loads((smoke_run / "metrics.json").read_text())
    S = m["acc_matrix"]
    assert m["completed_tasks"] == m["num_tasks"] == 3
    assert all(S[i][t] is None for i in range(3) for t in range(i))
    assert m["FA"] == pytest.approx(sum(S[i][2] for i in range(3)) / 3)
    assert m["CA"] == pytest.approx((S[0][0] + (S[0][1] + S[1][1]) / 2 + m["FA"]) / 3)
    assert all(0.0 <= v <= 1.0 for v in (m["FA"], m["CA"], m["til_FA"]))  # FM may be < 0 (a task improving)
    assert -1.0 <= m["FM"] <= 1.0
    assert len(m["tii_accuracy"]) == 3 and len(m["task_seconds"]) == 3
    assert sorted(c for task in m["task_classes"] for c in task) == list(range(30))
    csv_rows = (smoke_run / "acc_matrix.csv").read_text().splitlines()
    assert len(csv_rows) == 4 and csv_rows[3].startswith("2,,,")


def test_stages_learn_on_synthetic_data(smoke_run):
    m = json.loads((smoke_run / "metrics.json").read_text())
    assert m["FA"] > 0.9, m["acc_matrix"]
    assert min(m["tii_accuracy"]) > 0.9


def test_gates_train_on_task_one_then_freeze_and_old_prompts_never_change(smoke_run):
    run = RunDir(smoke_run)
    states = [run.load_checkpoint(t)["method"] for t in range(3)]
    gates = [s["gates"] for s in states]
    assert any(float(g["alpha"]) != 1.0 for g in gates[0].values())  # trained during task 1
    for later in gates[1:]:
        for layer, g in later.items():
            assert torch.equal(g["alpha"], gates[0][layer]["alpha"]) and torch.equal(g["tau"], gates[0][layer]["tau"])
    for t in range(3):
        for later in states[t + 1:]:
            assert torch.equal(later["prompts"][f"prompts.{t}"], states[t]["prompts"][f"prompts.{t}"])
            assert torch.equal(later["task_prompts"][t], states[t]["task_prompts"][t])


def test_a_second_run_of_the_same_seed_killed_and_resumed_equals_the_first(smoke_run, tmp_path):
    """A fresh process with the same seed trains the first task(s) again, is killed, and a third process resumes
    it: equal metrics show both determinism across processes and an exact resume (one run's cost for both)."""
    out = tmp_path / "interrupted"
    cmd = [sys.executable, str(REPO_ROOT / "train.py"), "--config", str(SMOKE), "--output-dir", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (out / "checkpoints" / "task_00.pt.sha256").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # inside task 1 (of 0-2) by now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = json.loads((out / "metrics.json").read_text())
    assert 1 <= partial["completed_tasks"] < 3  # killed mid-run; metrics only describe completed tasks
    first = json.loads((smoke_run / "metrics.json").read_text())
    done = partial["completed_tasks"]  # the same seed in a new process: the same accuracies after its first tasks
    assert [row[:done] for row in partial["acc_matrix"]] == [row[:done] for row in first["acc_matrix"]]
    resumed = train(out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after task" in (out / "log.txt").read_text()
    assert_same_metrics(json.loads((out / "metrics.json").read_text()), first)


def test_a_finished_run_refuses_a_changed_config(smoke_run, tmp_path):
    result = train(smoke_run, "--set", "method.wtp.epochs=4")
    assert result.returncode == 2 and "already trained with another config (changed: ['method.wtp.epochs'])" in \
        result.stderr and "nothing was retrained" in result.stderr


def test_eval_reproduces_the_training_metrics(smoke_run, tmp_path):
    out = tmp_path / "eval.json"
    result = subprocess.run([sys.executable, str(REPO_ROOT / "eval.py"), "--run", str(smoke_run), "--output", str(out)],
                            capture_output=True, text=True, env=ENV, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    trained = json.loads((smoke_run / "metrics.json").read_text())
    evaluated = json.loads(out.read_text())
    for key in ("acc_matrix", "til_acc_matrix", "tii_acc_matrix"):
        assert evaluated[key] == trained[key]


def test_prompt_choice_is_per_sample_not_per_batch(smoke_run):
    """Accuracies are identical whether test samples come one by one or in mixed batches."""
    from conftest import load_run_method

    cfg, bench, learner = load_run_method(smoke_run)
    mixed = torch.utils.data.ConcatDataset([bench.test_set(i) for i in range(3)])
    subset = torch.utils.data.Subset(mixed, list(range(0, len(mixed), 7)))
    results = []
    for batch_size in (1, len(subset)):
        loader = torch.utils.data.DataLoader(subset, batch_size=batch_size)
        e = evaluate_task(learner, 0, learner.seen_mask(2), loader, torch.device("cpu"))
        results.append((e.cil_accuracy, e.tii_accuracy, e.til_accuracy))
    assert results[0] == pytest.approx(results[1], abs=1e-9)


def test_dry_run_smoke_prints_the_split(tmp_path):
    result = train(tmp_path / "dry", "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dry run OK" in result.stdout and not (tmp_path / "dry").exists()


# the configs that read real data: the benchmarks and the benchmark regimes' base configs (their arms add only
# method keys; the smoke configs read synthetic data)
BENCH_CONFIGS = sorted([*(REPO_ROOT / "configs").glob("*.yaml"), *(REPO_ROOT / "configs" / "bench").glob("*.yaml")])
BENCH_CONFIGS = [p for p in BENCH_CONFIGS if p.stem != "smoke"]


@pytest.fixture
def architecture_without_random_init(monkeypatch):
    """timm's ViT and torch's Linear layers built without drawing their random initial values (a ViT-B/16 spends
    ~2.5 s of a 2.6 s dry run there). Only for dry runs that stop before any forward: the weights stay
    uninitialised memory."""
    import timm.models.vision_transformer as timm_vit

    monkeypatch.setattr(timm_vit.VisionTransformer, "init_weights", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", lambda self: None)


@pytest.mark.parametrize("path", BENCH_CONFIGS, ids=[p.stem for p in BENCH_CONFIGS])
def test_dry_run_reports_missing_data_clearly(path, tmp_path, architecture_without_random_init):
    from norga.engine import dry_run

    cfg = load_config(path, [f"data.root={tmp_path / 'nothing_here'}"])
    with pytest.raises(NorgaError) as err:  # the data's DataError, or with the weights' problem in one error
        dry_run(cfg)
    assert str(tmp_path / "nothing_here") in str(err.value)
    assert isinstance(err.value, DataError) or "(1) " in str(err.value)


def test_feature_cache_changes_no_number_and_skips_forwards(smoke_run):
    """A warm cache gives the same accuracies as a cold one, without running the backbone again."""
    from conftest import load_run_method, loaders_of

    cfg, bench, learner = load_run_method(smoke_run)
    model = learner.model
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    cache = learner.new_eval_cache()
    test = loaders_of(cfg, bench, learner, 1).test
    runs = []
    for _ in range(2):
        e = evaluate_task(learner, 1, learner.seen_mask(2), test, torch.device("cpu"), cache)
        runs.append((e.cil_accuracy, e.til_accuracy, e.tii_accuracy, len(calls)))
    cold = evaluate_task(learner, 1, learner.seen_mask(2), test, torch.device("cpu"))
    assert runs[0][:3] == runs[1][:3] == (cold.cil_accuracy, cold.til_accuracy, cold.tii_accuracy)
    assert runs[0][3] > 0 and runs[1][3] == runs[0][3], "the warm evaluation ran the backbone again"
