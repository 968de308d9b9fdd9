"""DualPrompt: key matching by hand, G/E prefixes on their blocks, frozen old E-prompts and keys, the gate's
first-task training, the pull towards the queries, per-sample predictions, and a run that resumes and
re-evaluates identically."""
from __future__ import annotations

import pytest
import torch

from conftest import (assert_predictions_per_sample, build_run_parts,
                      checkpoint_method_state, load_run_method, loaders_of)
from faults import assert_kill_then_resume_matches, tiny_method_args
from norga.config import ConfigError, load_config
from norga.methods.dualprompt import nearest_key
from conftest import DUAL, SMOKE


def tiny_args(out) -> list:
    return tiny_method_args(out, DUAL)


def test_nearest_key_by_hand():
    """Keys 2 e1, 5 e2, -e1: query (3, 4) has cosines 0.6, 0.8, -0.6; (-1, 0.1) is nearest to -e1;
    (0, -1) has cosines 0, -1, 0: the tie goes to the lower index."""
    keys = torch.tensor([[2.0, 0.0], [0.0, 5.0], [-1.0, 0.0]])
    queries = torch.tensor([[3.0, 4.0], [-1.0, 0.1], [0.0, -1.0]])
    assert nearest_key(queries, keys).tolist() == [1, 2, 0]


def test_config_defaults_and_errors_name_the_fix():
    m = load_config(SMOKE, ["method={name: dualprompt}"]).method
    assert (m.g_prompt_layers, m.g_prompt_length, m.e_prompt_layers, m.e_prompt_length) == ([0, 1], 5, [2, 3, 4], 5)
    assert (m.gate, m.pull_coeff, m.epochs, m.lr, m.batch_size) == ({"name": "linear"}, 1.0, 5, 0.03, 24)
    with pytest.raises(ConfigError, match=r"share blocks \[1\]"):
        load_config(SMOKE, ["method={name: dualprompt, g_prompt_layers: [0, 1], e_prompt_layers: [1, 2]}"])
    cfg = load_config(SMOKE, ["method={name: dualprompt}"])  # the smoke ViT has 2 blocks
    with pytest.raises(ConfigError, match=r"method.e_prompt_layers=\[2, 3, 4\]: needs distinct block indices"):
        build_run_parts(cfg)


def test_g_and_e_prompts_go_to_their_blocks_as_per_head_prefixes(dual_run):
    cfg, out, _ = dual_run
    _, _, method = load_run_method(out)
    e = method.e_prompts[torch.tensor([2, 0])]  # (2, 1, 2, L_e, H, Dh)
    prefixes = method.prompts(e).prefixes
    assert sorted(prefixes) == [0, 1]
    g_keys, g_values = prefixes[0]
    assert torch.equal(g_keys[0, 1], method.g_prompt[0, 0, :, 1])  # head 1's keys: (L_g, Dh)
    assert torch.equal(g_values[0, 0], method.g_prompt[0, 1, :, 0])
    e_keys, e_values = prefixes[1]
    assert e_keys.shape == (2, method.model.num_heads, 3, method.model.head_dim)
    assert torch.equal(e_keys[1, 1], method.e_prompts[0, 0, 0, :, 1])  # sample 1 uses task 0's E-prompt
    assert torch.equal(e_values[0, 0], method.e_prompts[2, 0, 1, :, 0])


def test_old_e_prompts_and_keys_stay_frozen_the_g_prompt_and_first_task_gate_train(dual_run):
    _, out, metrics = dual_run
    assert metrics["completed_tasks"] == 3 and len(metrics["tii_accuracy"]) == 3
    first, last = checkpoint_method_state(out, 0), checkpoint_method_state(out, 2)
    assert torch.equal(first["e_prompts"][0], last["e_prompts"][0])
    assert torch.equal(first["keys"][0], last["keys"][0])
    assert not torch.equal(first["g_prompt"], last["g_prompt"])  # shared: trains on every task
    assert not torch.equal(last["e_prompts"][1], last["e_prompts"][2])
    gate0, gate2 = first["gates"]["0"], last["gates"]["0"]
    assert gate0["alpha"].item() != 1.0 and torch.equal(gate0["alpha"], gate2["alpha"])  # NoRGa: first task only


def test_the_pull_loss_moves_each_task_key_towards_its_queries(dual_run):
    cfg, out, _ = dual_run
    _, bench, initial = build_run_parts(cfg)
    _, _, trained = load_run_method(out)
    for task in range(3):
        x, _ = next(iter(loaders_of(cfg, bench, initial, task).train_plain))
        with torch.no_grad():
            query = initial.model(x)
        cos = lambda key: torch.nn.functional.cosine_similarity(query, key[None]).mean()  # noqa: E731
        assert cos(trained.keys[task]) > cos(initial.keys[task]) + 0.05


def test_predictions_are_per_sample_and_the_true_task_uses_its_own_e_prompt(dual_run):
    cfg, out, _ = dual_run
    method, x, whole = assert_predictions_per_sample(cfg, out, 1)
    with torch.no_grad():
        query = method.model(x)
        selected = method.head(method.model(x, method.prompts(method.e_prompts[nearest_key(query, method.keys)])))
        true = method.head(method.model(x, method.prompts(method.e_prompts[1].unsqueeze(0))))
    assert torch.allclose(whole.logits, selected, atol=1e-5)
    assert torch.allclose(whole.true_task_logits, true, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bar:dualprompt:1"])  # evaluation kills: tests/test_contract.py
def test_kill_and_resume_gives_the_uninterrupted_metrics(spec, dual_run, tmp_path):
    assert_kill_then_resume_matches(tiny_args, spec, tmp_path, reference=dual_run[1])  # the module's run
