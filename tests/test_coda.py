"""CODA-Prompt: the weighted component sum by hand, orthogonality of new components to old ones, the penalty
by hand, frozen old components, CODA's cosine schedule, per-sample predictions, and a run that resumes and
re-evaluates identically."""
from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import (build_run_parts,
                      checkpoint_method_state, load_run_method)
from faults import assert_kill_then_resume_matches, tiny_method_args
from norga.config import ConfigError, load_config
from norga.toolkit.schedules import lr_factor
from norga.methods.coda import POOLS, component_weights, ortho_penalty, orthonormal_rows
from conftest import CODA, SMOKE, TINY_DATA


def tiny_args(out) -> list:
    return tiny_method_args(out, CODA)


def test_component_weights_by_hand():
    """q = (1, 2); A_0 = (1, 1), K_0 = (1, 0): q*A_0 = (1, 2), cos = 1/√5. A_1 = (2, 0), K_1 = (1, 1):
    q*A_1 = (2, 0), cos = 1/√2. A_2 = (0, 1), K_2 = (0, -3): q*A_2 = (0, 2), cos = -1."""
    q = torch.tensor([[1.0, 2.0]])
    attention = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 1.0]])
    keys = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -3.0]])
    expected = torch.tensor([[1 / math.sqrt(5), 1 / math.sqrt(2), -1.0]])
    assert torch.allclose(component_weights(q, keys, attention), expected)


def test_new_rows_are_orthonormal_and_orthogonal_to_old_non_orthogonal_rows():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(5, 12, generator=g) + 3.0  # far from orthogonal (as learned components are)
    new = orthonormal_rows(old, 4, g)
    assert torch.allclose(new @ new.T, torch.eye(4), atol=1e-5)
    assert (new @ old.T).abs().max() < 1e-5


def test_ortho_penalty_by_hand():
    """Rows (1, 0), (1, 1): X Xᵀ − I = [[0, 1], [1, 1]], mean of squares 3/4; orthonormal rows: 0."""
    assert ortho_penalty(torch.tensor([[1.0, 0.0], [1.0, 1.0]])).item() == pytest.approx(0.75)
    assert ortho_penalty(torch.eye(3)).item() == 0.0


def test_coda_cosine_schedule_by_hand():
    assert lr_factor(0, "coda_cosine", 20) == 1.0
    assert lr_factor(19, "coda_cosine", 20) == pytest.approx(math.cos(0.495 * math.pi))  # ~0.0157
    assert lr_factor(10, "coda_cosine", 21) == pytest.approx(math.cos(0.2475 * math.pi))


def test_config_defaults_and_errors_name_the_fix():
    m = load_config(SMOKE, ["method={name: coda}"]).method
    assert (m.pool_size, m.prompt_length, m.ortho_mu, m.lr, m.epochs, m.schedule) == (100, 8, 0.0, 0.001, 20,
                                                                                      "coda_cosine")
    with pytest.raises(ConfigError, match="method.prompt_length=5 must be even"):
        load_config(SMOKE, ["method={name: coda, prompt_length: 5}"])
    for pool, message in ((2, "set method.pool_size >= 3"), (300, "set method.pool_size <= 64")):
        cfg = load_config(SMOKE, TINY_DATA + [f"method={{name: coda, prompt_layers: [0], pool_size: {pool}}}"])
        with pytest.raises(ConfigError, match=message):
            build_run_parts(cfg)


def test_prefixes_are_the_weighted_sums_split_into_keys_values_and_heads(coda_run):
    _, out, _ = coda_run
    _, _, method = load_run_method(out)
    query = torch.randn(3, method.model.embed_dim)
    components, keys, attention = method.in_use(3)
    prefixes = method.prompts(query, components, keys, attention).prefixes
    dh = method.model.head_dim
    for j, block in enumerate((0, 1)):
        for b in range(3):
            alpha = [torch.nn.functional.cosine_similarity(query[b] * attention[j, m], keys[j, m], dim=0)
                     for m in range(6)]
            prompt = sum(a * components[j, m] for m, a in enumerate(alpha))  # (L=4, W)
            for h in range(method.model.num_heads):
                assert torch.allclose(prefixes[block][0][b, h], prompt[:2, h * dh:(h + 1) * dh], atol=1e-5)
                assert torch.allclose(prefixes[block][1][b, h], prompt[2:, h * dh:(h + 1) * dh], atol=1e-5)


def test_old_components_stay_frozen_and_each_task_draws_orthogonal_new_ones(coda_run):
    cfg, out, metrics = coda_run
    assert metrics["completed_tasks"] == 3 and metrics["tii_accuracy"] is None
    first, last = checkpoint_method_state(out, 0), checkpoint_method_state(out, 2)
    for name in POOLS:
        assert torch.equal(first[name][:, :2], last[name][:, :2])  # task 0 owns rows 0-1
        assert first[name][:, 2:].abs().sum() == 0  # later tasks' rows are drawn when their task starts
        assert not torch.equal(last[name][:, 2:4], last[name][:, 4:])
    _, _, method = build_run_parts(cfg)
    method.load_state_dict(first)
    method.draw_orthonormal(2, 4, torch.Generator().manual_seed(1))
    for name, pool in method.pools.items():
        for p in range(2):
            rows = pool[p].flatten(1)
            assert (rows[2:4] @ rows[:2].T).abs().max() < 1e-4  # orthogonal to task 0's trained rows
            assert torch.allclose(rows[2:4] @ rows[2:4].T, torch.eye(2), atol=1e-5)
    assert set(metrics["method"]["max_cross_task_cosine"]) == set(POOLS)


def test_the_orthogonality_penalty_is_a_logged_loss_term(coda_run):
    _, out, _ = coda_run
    lines = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    ortho = [line["ortho"] for line in lines if line.get("stage") == "coda"]
    assert len(ortho) == 6 and all(v > 0 for v in ortho)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bar:coda:1"])  # evaluation kills: tests/test_contract.py
def test_kill_and_resume_gives_the_uninterrupted_metrics(spec, coda_run, tmp_path):
    assert_kill_then_resume_matches(tiny_args, spec, tmp_path, reference=coda_run[1])  # the module's run
