"""Config schema: YAML loading, overrides, strict errors naming the key path; shipped configs."""
from __future__ import annotations

from pathlib import Path

import pytest

from norga.config import ConfigError, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert cfg.data.num_tasks >= 1 and cfg.model.prompt_length >= 1


def test_shipped_benchmark_configs_follow_the_reference():
    cifar = load_config(CONFIGS[0].parent / "cifar100_norga.yaml")
    assert (cifar.wtp.epochs, cifar.wtp.lr, cifar.wtp.schedule, cifar.wtp.milestones) == (50, 0.03, "step", [30])
    assert (cifar.model.gate, cifar.model.activation, cifar.model.prompt_length) == ("norga", "sigmoid", 5)
    assert (cifar.tap.lr, cifar.tap.epochs, cifar.tii.align_epochs) == (0.05, 80, 30)
    hide = load_config(CONFIGS[0].parent / "cifar100_hideprompt.yaml")
    assert (hide.model.gate, hide.tii.mlp_ratios, hide.wtp.grad_clip, hide.model.prompt_length) == (
        "linear", [2], 1.0, 5)


def test_overrides_and_strict_types(tmp_path):
    cfg = load_config(None, ["wtp.epochs=3", "model.gate=linear", "stats.ridge=1e-3", "data.class_order=[2, 0, 1]"])
    assert cfg.wtp.epochs == 3 and cfg.model.gate == "linear" and cfg.stats.ridge == 1e-3
    assert cfg.data.class_order == [2, 0, 1]
    cases = {
        "wtp.epochs=three": "wtp.epochs: expected an integer",
        "wtp.lr=-1": r"wtp.lr: must be > 0.0",
        "tii.cache_features=yes please": "tii.cache_features: expected true or false",
        "tii.cache_features=1": "tii.cache_features: expected true or false",
        "stats.kind=full": r"stats.kind: 'full' is not one of",
        "wtp.momentum=1.5": r"wtp.momentum: must be <= 1.0",
        "wtp.epoch=3": r"unknown key\(s\) \['wtp.epoch'\] at wtp",
        "model.prompt_layers=[0, x]": r"model.prompt_layers\[1\]: expected an integer",
        "nonsense": "must look like key.path=value",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [override])


def test_yaml_errors_name_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("data:\n  num_tasks: 0\n")
    with pytest.raises(ConfigError, match="data.num_tasks: must be >= 1, got 0"):
        load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
