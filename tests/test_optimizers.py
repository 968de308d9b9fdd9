"""The optimiser registry (norga/toolkit/optimizers.py) and the methods whose config chooses one by name."""
import dataclasses
from pathlib import Path

import pytest
import torch

import norga.methods.sd_lora as sd_lora_module
from conftest import build_run_parts, loaders_of
from norga.config import METHOD_CONFIGS, load_config
from norga.toolkit.optimizers import OPTIMIZERS, make_optimizer

SD_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "sd_lora.yaml"


def test_names_give_the_torch_optimizer_with_the_given_settings():
    w = [torch.nn.Parameter(torch.zeros(2))]
    sgd = make_optimizer("sgd", w, 0.1, weight_decay=0.01, momentum=0.8)
    assert type(sgd) is torch.optim.SGD
    assert {k: sgd.defaults[k] for k in ("lr", "momentum", "weight_decay")} == {"lr": 0.1, "momentum": 0.8,
                                                                                "weight_decay": 0.01}
    adam = make_optimizer("adam", w, 0.008)
    assert type(adam) is torch.optim.Adam and adam.defaults["betas"] == (0.9, 0.999)
    assert (adam.defaults["lr"], adam.defaults["weight_decay"]) == (0.008, 0.0)
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamw'; registered: \['adam', 'sgd'\]"):
        make_optimizer("adamw", w, 0.1)


def test_every_config_choice_is_a_registered_optimizer():
    fields = [(name, f) for name, cls in METHOD_CONFIGS.items() for f in dataclasses.fields(cls)
              if f.name == "optimizer"]
    assert {name for name, _ in fields} >= {"sprompt", "sd_lora"}
    for name, f in fields:
        assert set(f.metadata["choices"]) <= set(OPTIMIZERS), name


@pytest.mark.parametrize("choice, kind", [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam)])
def test_sd_lora_trains_with_the_configured_optimizer(choice, kind, monkeypatch):
    """``method.optimizer`` reaches the task's training: SGD (official) or Adam (the paper), with the config's lr."""
    made = []

    def spy(*args, **kwargs):
        made.append(make_optimizer(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sd_lora_module, "make_optimizer", spy)
    cfg = load_config(SD_SMOKE, ["method.epochs=1", f"method.optimizer={choice}", "method.lr=0.004"])
    cfg, bench, method = build_run_parts(cfg)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    assert len(made) == 1 and type(made[0]) is kind and made[0].defaults["lr"] == 0.004
    trained = {id(p) for group in made[0].param_groups for p in group["params"]}
    assert id(method.magnitudes[0]) in trained and all(id(p) in trained for p in method.head.parameters())
