"""Config schema: YAML loading, overrides, strict errors naming the key path; shipped configs."""
from __future__ import annotations

from pathlib import Path

import pytest

from norga.config import ConfigError, load_config, method_configs

NORGA_DEFAULTS = {"name": "norga", "activation": "tanh", "alpha_init": 1.0, "tau_init": 1.0}
CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
# every registered method with shipped benchmark configs beside HiDe-Prompt's (the registry decides, not a list)
BASELINES = sorted(m for m in method_configs() if m not in ("hideprompt", "norga")
                   and (CONFIGS[0].parent / f"cifar100_{m}.yaml").is_file())


def test_the_baselines_with_shipped_configs_are_found():
    assert {"l2p", "dualprompt", "sprompt", "coda"} <= set(BASELINES)


@pytest.mark.parametrize("method", BASELINES)
@pytest.mark.parametrize("bench", ["cifar100", "imagenet_r"])
def test_baseline_configs_share_data_model_and_evaluation_with_hideprompt(bench, method):
    root = CONFIGS[0].parent
    base, hide = load_config(root / f"{bench}_{method}.yaml"), load_config(root / f"{bench}_hideprompt.yaml")
    assert (base.data, base.model, base.seed, base.eval_mask_unseen) == (hide.data, hide.model, hide.seed,
                                                                          hide.eval_mask_unseen)


def test_shipped_benchmark_configs_follow_the_reference():
    cifar = load_config(CONFIGS[0].parent / "cifar100_norga.yaml")
    w = cifar.method.wtp
    assert (w.epochs, w.lr, w.schedule, w.milestones) == (50, 0.03, "step", [30])
    assert (cifar.method.gate, cifar.method.prompt_length) == ({**NORGA_DEFAULTS, "activation": "sigmoid"}, 5)
    assert (cifar.method.tap.lr, cifar.method.tap.epochs, cifar.method.tii.align_epochs) == (0.05, 80, 30)
    hide = load_config(CONFIGS[0].parent / "cifar100_hideprompt.yaml")
    h = hide.method
    assert (h.gate, h.tii.mlp_ratios, h.wtp.grad_clip, h.prompt_length) == ({"name": "linear"}, [2], 1.0, 5)
    assert (h.tap.lr, h.tap.epochs) == (0.005, 30)  # the HiDe-Prompt script's TAP


@pytest.mark.parametrize("bench", ["cifar100", "cub200", "imagenet_r", "five_datasets"])
def test_norga_configs_differ_from_their_hideprompt_base_only_where_they_say(bench):
    """Each _norga config is its _hideprompt base plus a few keys: everything else must come through unchanged."""
    root = CONFIGS[0].parent
    norga, hide = load_config(root / f"{bench}_norga.yaml"), load_config(root / f"{bench}_hideprompt.yaml")
    assert "base:" in (root / f"{bench}_norga.yaml").read_text()
    assert norga.method.gate["name"] == "norga" and hide.method.gate == {"name": "linear"}
    assert (norga.data, norga.model, norga.method.wtp, norga.method.stats) == (hide.data, hide.model, hide.method.wtp,
                                                                               hide.method.stats)


def test_base_includes_merge_sections_and_replace_other_names(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text("seed: 1\ndata: {num_tasks: 4, classes_per_task: 2}\n"
                                        "method: {gate: {name: norga, activation: gelu}, wtp: {epochs: 7, lr: 0.5},"
                                        " prompt_layers: [0, 1]}\n")
    (tmp_path / "sub" / "child.yaml").write_text("base: ../base.yaml\ndata: {num_tasks: 2}\n"
                                                 "method: {gate: {name: linear}, wtp: {epochs: 3}, "
                                                 "prompt_layers: [2]}\n")
    cfg = load_config(tmp_path / "sub" / "child.yaml")
    assert (cfg.seed, cfg.data.num_tasks, cfg.data.classes_per_task) == (1, 2, 2)  # mappings merge key by key
    assert (cfg.method.wtp.epochs, cfg.method.wtp.lr) == (3, 0.5)
    assert cfg.method.prompt_layers == [2]  # lists are replaced, not merged
    assert cfg.method.gate == {"name": "linear"}  # another gate: the base's options (activation) are dropped
    assert load_config(tmp_path / "sub" / "child.yaml", ["method.wtp.epochs=9"]).method.wtp.epochs == 9


def test_base_include_errors_name_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="includes itself"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"c.yaml: base config not found: .*missing.yaml"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("base: [a.yaml]\n")
    with pytest.raises(ConfigError, match="base must be the path of another config file"):
        load_config(tmp_path / "d.yaml")


@pytest.mark.parametrize("old, new", [
    ("wtp.epochs=3", "method.wtp"), ("tii.lr=0.1", "method.tii"), ("tap.epochs=1", "method.tap"),
    ("stats.ridge=0.1", "method.stats"), ("head_init=pytorch", "method.head_init"),
    ("scale_lr_by_batch=false", "method.scale_lr_by_batch"), ("model.gate=linear", "method.gate.name"),
    ("model.activation=gelu", "method.gate.activation"), ("model.prompt_length=0", "method.prompt_length"),
    ("model.prompt_layers=[0]", "method.prompt_layers"),
])
def test_old_layout_keys_get_an_error_naming_their_new_place(old, new):
    with pytest.raises(ConfigError, match=f"moved to {new}"):
        load_config(None, [old])


def test_method_name_selects_the_section_and_unknown_methods_are_named():
    assert type(load_config(None).method).__name__ == "NoRGaConfig"
    known = r"\[.*'coda', 'dualprompt'.*'hideprompt'.*'norga'.*\]"
    with pytest.raises(ConfigError, match=r"method.name: unknown method 'l2p_typo'; choose one of " + known):
        load_config(None, ["method.name=l2p_typo"])
    with pytest.raises(ConfigError, match="method.gate: needs a gate name"):
        load_config(None, ["method.gate={activation: tanh, name: 3}"])
    # the section is resolved when the config loads: every option's value, the name the method's default
    assert load_config(None, ["method.gate={activation: gelu}"]).method.gate == {**NORGA_DEFAULTS, "activation": "gelu"}


def test_hideprompt_is_the_linear_gate_and_norga_the_same_pipeline_with_a_gate():
    hide, norga = load_config(None, ["method.name=hideprompt"]), load_config(None, ["method.name=norga"])
    assert hide.method.gate == {"name": "linear"} and norga.method.gate == NORGA_DEFAULTS
    assert issubclass(type(norga.method), type(hide.method))  # every hideprompt option applies to norga
    with pytest.raises(ConfigError, match=r"^method.gate.name: 'norga' under method.name: hideprompt.*set "
                                          r"method.name: norga"):
        load_config(None, ["method={name: hideprompt, gate: {name: norga, activation: tanh}}"])
    # norga takes any registered gate, the linear one too (a paired HiDe-Prompt control)
    assert load_config(None, ["method.gate={name: linear}"]).method.gate == {"name": "linear"}


def test_a_child_config_switching_between_hideprompt_and_norga_keeps_its_base_values(tmp_path):
    (tmp_path / "hide.yaml").write_text("method: {name: hideprompt, prompt_length: 7, wtp: {epochs: 4}}\n")
    (tmp_path / "norga.yaml").write_text("base: hide.yaml\nmethod: {name: norga, gate: {name: norga}}\n")
    (tmp_path / "l2p.yaml").write_text("base: hide.yaml\nmethod: {name: l2p}\n")
    child = load_config(tmp_path / "norga.yaml").method
    assert (child.name, child.prompt_length, child.wtp.epochs, child.gate["name"]) == ("norga", 7, 4, "norga")
    assert load_config(tmp_path / "l2p.yaml").method.prompt_length != 7  # another method: the base's values go


def test_a_child_config_switching_to_hidelora_keeps_only_the_sections_both_methods_take(tmp_path):
    """HiDe-LoRA takes HiDe-Prompt's tii/tap/stats (subclassed sections) but not its wtp or prompt options."""
    from norga.config import shared_sections

    assert shared_sections("norga", "hidelora") == shared_sections("hidelora", "hideprompt") == ("stats", "tii", "tap")
    assert shared_sections("norga", "l2p") == () and shared_sections("norga", "no_such_method") == ()
    (tmp_path / "hide.yaml").write_text("method: {name: norga, prompt_length: 7, stats: {kind: variance},"
                                        " tii: {epochs: 3, lr: 0.002}, tap: {epochs: 4}, wtp: {epochs: 6}}\n")
    (tmp_path / "lora.yaml").write_text("base: hide.yaml\nmethod: {name: hidelora, tii: {epochs: 5}}\n")
    lora = load_config(tmp_path / "lora.yaml").method
    assert (lora.tii.epochs, lora.tii.lr, lora.tap.epochs, lora.stats.kind) == (5, 0.002, 4, "variance")
    assert lora.wtp.epochs == load_config(None, ["method={name: hidelora}"]).method.wtp.epochs  # its own default
    assert lora.tap.lr == 0.005  # HiDe-LoRA's own default for a key the base does not state


def test_overrides_and_strict_types(tmp_path):
    cfg = load_config(None, ["method.wtp.epochs=3", "method.gate={name: linear}", "method.stats.ridge=1e-3",
                             "data.class_order=[2, 0, 1]"])
    assert cfg.method.wtp.epochs == 3 and cfg.method.gate == {"name": "linear"} and cfg.method.stats.ridge == 1e-3
    assert cfg.data.class_order == [2, 0, 1]
    cases = {
        "method.wtp.epochs=three": "method.wtp.epochs: expected an integer",
        "method.wtp.lr=-1": r"method.wtp.lr: must be > 0.0",
        "method.tii.cache_features=yes please": "method.tii.cache_features: expected true or false",
        "method.tii.cache_features=1": "method.tii.cache_features: expected true or false",
        "method.stats.kind=full": r"method.stats.kind: 'full' is not one of",
        "method.wtp.momentum=1.5": r"method.wtp.momentum: must be <= 1.0",
        "method.wtp.epoch=3": r"unknown key\(s\) \['method.wtp.epoch'\] at method.wtp",
        "method.prompt_layers=[0, x]": r"method.prompt_layers\[1\]: expected an integer",
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
