"""Random streams: a method's initial values come from a named stream of their own, never from the stream of the
task's data order or augmentation (the engine's numbered streams), recomputed here by hand per method."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SMOKE, build_run_parts
from norga.config import ConfigError, load_config
from norga.methods.coda import INIT_STREAM as CODA_INIT
from norga.methods.dualprompt import INIT_STREAM as DUALPROMPT_INIT
from norga.methods.l2p import INIT_STREAM as L2P_INIT
from norga.methods.ranpac import PROJECTION_STREAM
from norga.toolkit.seeding import named_generator, task_generator, task_seed

TINY = ["data.classes_per_task=2", "data.options={num_classes: 6, train_per_class: 12, test_per_class: 6}"]


def numbered_seeds(seeds=range(0, 60), tasks=range(0, 20), stages=range(0, 12)) -> set:
    """Every seed of the engine's numbered streams: global task seeds and task_generator stages."""
    out = {task_seed(s, t) for s in seeds for t in tasks}
    return out | {task_generator(s, t, k).initial_seed() for s in seeds for t in tasks for k in stages}


def test_a_named_stream_is_seeded_by_hand_and_never_a_numbered_one():
    g = named_generator(42, 3, "l2p.init")
    words = np.random.SeedSequence([42, 3, 108, 50, 112, 46, 105, 110, 105, 116]).generate_state(1, np.uint64)
    assert g.initial_seed() == int(words[0]) + 2**63 * (int(words[0]) < 2**63)  # bit 63 set by hand
    named = {named_generator(s, t, n).initial_seed() for s in range(60) for t in range(20)
             for n in ("l2p.init", "dualprompt.init", "coda.init", "ranpac.projection")}
    assert len(named) == 60 * 20 * 4  # names, tasks and seeds all give different streams
    assert not named & numbered_seeds()
    assert task_generator(7, 0, 0).initial_seed() == task_seed(7, 0)  # the numbered coincidence kept (docs)
    assert torch.equal(torch.rand(5, generator=named_generator(1, 0, "x")),
                       torch.rand(5, generator=named_generator(1, 0, "x")))


@pytest.mark.parametrize("bad", [(-1, 0, "a"), (0, -1, "a"), (0, 0, "")])
def test_named_generator_refuses_bad_arguments(bad):
    with pytest.raises(ValueError, match="named_generator needs"):
        named_generator(*bad)


@pytest.mark.parametrize("seed", [-1, 2**43])
def test_a_seed_out_of_range_is_a_config_error(seed):
    with pytest.raises(ConfigError, match=r"seed: expected an integer in \[0, 2\*\*43\)"):
        load_config(SMOKE, [f"seed={seed}"])


def _method(spec: str, seed: int = 3):
    return build_run_parts(load_config(SMOKE, TINY + [f"seed={seed}", f"method={spec}"]))[2]


def _uniform(g: torch.Generator, *shape) -> torch.Tensor:
    return 2 * torch.rand(*shape, generator=g) - 1


def test_l2p_draws_its_pool_from_its_own_stream():
    m = _method("{name: l2p, pool_size: 4, prompt_length: 2, top_k: 2}")
    g = named_generator(3, 0, L2P_INIT)
    assert torch.equal(m.prompts.detach(), _uniform(g, *m.prompts.shape))
    assert torch.equal(m.keys.detach(), _uniform(g, *m.keys.shape))
    loader = task_generator(3, 0, 0)  # task 0's shuffle: what the pool was drawn from before the fix
    assert not torch.equal(m.prompts.detach(), _uniform(loader, *m.prompts.shape))


def test_dualprompt_draws_its_prompts_and_keys_from_its_own_stream():
    m = _method("{name: dualprompt, g_prompt_layers: [0], e_prompt_layers: [1], g_prompt_length: 2, "
                "e_prompt_length: 2}")
    g = named_generator(3, 0, DUALPROMPT_INIT)
    assert torch.equal(m.g_prompt.detach(), _uniform(g, *m.g_prompt.shape))
    assert torch.equal(m.e_prompts, _uniform(g, *m.e_prompts.shape))
    assert torch.equal(m.keys, _uniform(g, *m.keys.shape))


def test_coda_draws_its_components_from_its_own_stream():
    m = _method("{name: coda, pool_size: 6, prompt_length: 2, prompt_layers: [0, 1], init: orthogonal}")
    drawn = {k: v.clone() for k, v in m.pools.items()}
    m.draw_orthonormal(0, m.c.pool_size, named_generator(3, 0, CODA_INIT))
    assert all(torch.equal(drawn[k], m.pools[k]) for k in drawn)
    m.draw_orthonormal(0, m.c.pool_size, task_generator(3, 0, 0))
    assert not torch.equal(drawn["components"], m.pools["components"])


def test_ranpac_draws_its_projection_from_its_own_stream():
    m = _method("{name: ranpac, projection_dim: 16}")
    expected = torch.randn(m.projection.shape, generator=named_generator(3, 0, PROJECTION_STREAM))
    assert torch.equal(m.projection, expected)
