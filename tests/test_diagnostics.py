"""HiDe-Prompt's per-task diagnostics: hand-computed helpers, recomputation from a run, and no effect on results."""
from __future__ import annotations


import pytest
import torch

from conftest import SHORT_SMOKE as FAST, SMOKE, load_run_method
from norga.config import load_config
from norga.engine import evaluate_run, run_training
from norga.toolkit.stages import extract_features
from norga.methods.hideprompt_diagnostics import (mean_feature_change, random_prompt_like, relative_change,
                                                  til_accuracy)

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")


def test_helpers_against_hand_computed_values():
    assert relative_change(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0])) == 0.0
    assert relative_change(torch.tensor([4.0, 4.0]), torch.tensor([3.0, 4.0])) == pytest.approx(1 / 5)
    frozen = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    prompted = torch.tensor([[3.0, 9.0], [1.0, 1.0]])  # relative changes 5/5 = 1 and 1/1 = 1
    assert mean_feature_change(prompted, frozen) == pytest.approx(1.0)
    assert mean_feature_change(frozen + torch.tensor([[0.0, 0.5], [0.0, 0.0]]), frozen) == pytest.approx(0.05)
    prompt = torch.full((2, 2, 3, 2, 4), 0.3)
    a = random_prompt_like(prompt, torch.Generator().manual_seed(1))
    b = random_prompt_like(prompt, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == prompt.shape and float(a.norm()) == pytest.approx(float(prompt.norm()))
    assert not torch.allclose(a, prompt)
    head = torch.nn.Linear(2, 3)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [10.0, 10.0]]))
        head.bias.zero_()
    feats, labels = torch.tensor([[2.0, 1.0], [1.0, 2.0], [0.0, 3.0]]), torch.tensor([0, 1, 0])
    # class 2 would win every row; restricted to classes {0, 1}: predictions 0, 1, 1 -> 2 of 3 right
    assert til_accuracy(head, feats, labels, torch.tensor([True, True, False])) == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diag")
    on = run_training(load_config(SMOKE, FAST), root / "on")
    off = run_training(load_config(SMOKE, FAST + ["method.diagnostics=false"]), root / "off")
    return root, on, off


def test_diagnostics_change_no_other_number(runs):
    _, on, off = runs
    for key in ("acc_matrix", "til_acc_matrix", "tii_acc_matrix", "official"):
        assert on[key] == off[key], key
    assert on["method"]["gate"] == off["method"]["gate"]
    assert off["method"]["diagnostics"] == [] and len(on["method"]["diagnostics"]) == 2


def test_diagnostics_recomputed_from_the_run(runs):
    """Feature change of the stored prompt and the TIL accuracy after TAP, recomputed outside the method."""
    root, on, _ = runs
    cfg, bench, method = load_run_method(root / "on")
    d = on["method"]["diagnostics"][1]
    assert d["task"] == 1 and set(d) >= {"prompt_change", "feature_change_trained", "feature_change_random",
                                         "wtp_first", "wtp_last", "til_frozen_probe", "til_prompted_before_tap",
                                         "til_prompted_after_tap", "gate"}
    plain = torch.utils.data.DataLoader(bench.train_set(1, train_transform=False), batch_size=64)
    frozen, _ = extract_features(method.model, plain, "cpu")
    prompted, _ = extract_features(method.model, plain, "cpu", method.task_prompts[1])
    assert d["feature_change_trained"] == pytest.approx(mean_feature_change(prompted, frozen), rel=1e-5)
    test = torch.utils.data.DataLoader(bench.test_set(1), batch_size=64)
    feats, labels = extract_features(method.model, test, "cpu", method.task_prompts[1])
    own = method.class_to_task == 1
    assert d["til_prompted_after_tap"] == pytest.approx(til_accuracy(method.head, feats, labels, own), abs=1e-9)
    assert d["til_prompted_after_tap"] == pytest.approx(on["til_acc_matrix"][1][1], abs=1e-9)
    first = on["method"]["diagnostics"][0]
    assert first["til_prompted_before_tap"] == first["til_prompted_after_tap"]  # no TAP after task 0 (authors)
    assert set(first["wtp_first"]) == {"loss", "ce", "reg"} and first["prompt_change"] > 0
    assert first["gate"]["alpha"] != [1.0, 1.0]  # NoRGa's alpha trained on task 0 ...
    assert d["gate"] == first["gate"]  # ... and stayed frozen on task 1


def test_diagnostics_survive_resume_and_evaluation(runs):
    root, on, _ = runs
    assert evaluate_run(root / "on")["method"]["diagnostics"] == on["method"]["diagnostics"]
    log = (root / "on" / "log.txt").read_text()
    assert "prompt Δ" in log and "vs frozen probe" in log
