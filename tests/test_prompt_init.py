"""Prompt initialisations (issue #33's factor): the authors' U(-1, 1) stays bit for bit, the others are what they
say."""
from __future__ import annotations

import pytest
import torch

from norga.config import ConfigError, load_config
from norga.models.prompts import PromptPool

from conftest import SMOKE

SHAPE = dict(num_tasks=2, num_layers=2, length=3, num_heads=2, head_dim=4)


def pool(init: str = "uniform", scale: float = 1.0, seed: int = 0) -> PromptPool:
    torch.manual_seed(seed)
    return PromptPool(**SHAPE, init=init, scale=scale)


def test_the_default_is_the_authors_uniform_draw_bit_for_bit():
    torch.manual_seed(0)
    expected = [torch.empty(2, 2, 3, 2, 4).uniform_(-1.0, 1.0) for _ in range(2)]
    got = pool()
    assert all(torch.equal(p, e) for p, e in zip(got.prompts, expected))


def test_scaled_uniform_zero_values_and_normal():
    small = pool("uniform", 0.01)
    assert torch.allclose(small.prompts[0], pool().prompts[0] * 0.01) and small.prompts[0].abs().max() <= 0.01
    zero = pool("zero_values", 0.5)
    assert torch.equal(zero.prompts[0][:, 1], torch.zeros(2, 3, 2, 4))  # values (index 1) are zero
    assert torch.allclose(zero.prompts[0][:, 0], pool().prompts[0][:, 0] * 0.5)  # keys: the scaled uniform draw
    torch.manual_seed(1)
    big = PromptPool(num_tasks=1, num_layers=4, length=20, num_heads=8, head_dim=16, init="normal", scale=0.02)
    values = big.prompts[0].detach().flatten()
    assert abs(float(values.std()) - 0.02) < 0.001 and abs(float(values.mean())) < 0.001
    with pytest.raises(ValueError, match="init must be one of"):
        PromptPool(**SHAPE, init="xavier")


def test_the_config_options_reach_the_pool():
    from norga.engine.task_loop import build_vit
    from norga.methods import build_method

    cfg = load_config(SMOKE, ["method.prompt_init=zero_values", "method.prompt_init_scale=0.1"])
    vit = build_vit(cfg)
    method = build_method(cfg, vit, [[0, 1], [2, 3]], torch.device("cpu"))
    first = method.pool.prompts[0].detach()
    assert float(first[:, 1].abs().max()) == 0.0 and 0 < float(first[:, 0].abs().max()) <= 0.1
    with pytest.raises(ConfigError, match="method.prompt_init: 'xavier' is not one of"):
        load_config(SMOKE, ["method.prompt_init=xavier"])
