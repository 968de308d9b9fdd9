"""The Method interface: registry, a second registered method through the unchanged runner, the shared loop,
and the runner/evaluation never naming a method, a gate or a head."""
from __future__ import annotations

import ast
import dataclasses
import re

import pytest
import torch

from conftest import REPO_ROOT, SMOKE, build_run_parts, loaders_of
from norga.config import ConfigError, MethodConfig, load_config
from norga.engine import evaluate_run, run_training
from norga.toolkit.heads import class_mask
from norga.toolkit.stages import extract_features
from norga.toolkit.training import Stage, run_stage
from norga.errors import NonFiniteLoss, RunError
from norga.methods import METHOD_CONFIGS, METHODS, method_class, register_method
from norga.methods.base import Method


def test_every_method_config_has_a_registered_implementation():
    assert {"hideprompt", "simplecil"} <= set(METHOD_CONFIGS)
    for name, config_class in METHOD_CONFIGS.items():
        assert issubclass(config_class, MethodConfig) and config_class().name == name
        cls = method_class(name)
        assert issubclass(cls, Method) and METHODS[name] is cls and cls.name == name
    with pytest.raises(ValueError, match="already registered"):
        register_method("hideprompt")(type("Again", (), {}))


def test_method_sections_are_typed_per_method():
    cfg = load_config(SMOKE, ["method={name: simplecil, metric: euclidean}"])
    assert type(cfg.method).__name__ == "SimpleCILConfig" and cfg.method.metric == "euclidean"
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['method.wtp'\] at method"):
        load_config(SMOKE, ["method={name: simplecil, wtp: {epochs: 1}}"])
    with pytest.raises(ConfigError, match="method.metric: 'manhattan' is not one of"):
        load_config(SMOKE, ["method={name: simplecil, metric: manhattan}"])


@pytest.fixture(scope="module")
def simplecil_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "simplecil"
    cfg = load_config(SMOKE, ["method={name: simplecil}"])
    return cfg, out, run_training(cfg, out)


def test_a_second_method_runs_through_the_same_runner_and_matches_hand_computed_prototypes(simplecil_run):
    """SimpleCIL end to end; its final accuracies recomputed here from class means of frozen features."""
    cfg, out, metrics = simplecil_run
    assert metrics["completed_tasks"] == 3 and metrics["method"] == {"name": "simplecil", "metric": "cosine",
                                                                       "prototypes": 30}
    assert metrics["tii_accuracy"] is None and metrics["tii_confusion"] is None  # it infers no task id
    _, bench, method = build_run_parts(cfg)
    feats, labels = zip(*(extract_features(method.model, loaders_of(cfg, bench, method, t).train_plain, "cpu")
                          for t in range(3)))
    feats, labels = torch.cat(feats), torch.cat(labels)
    means = torch.stack([feats[labels == c].mean(0) for c in range(method.num_classes)])
    for task in range(3):
        test_feats, test_labels = extract_features(method.model, loaders_of(cfg, bench, method, task).test, "cpu")
        similarity = torch.nn.functional.normalize(test_feats, dim=-1) @ torch.nn.functional.normalize(means, dim=-1).T
        cil = (similarity.argmax(1) == test_labels).sum().item() / len(test_labels)
        own = class_mask(method.num_classes, bench.task_classes[task])
        til = (similarity.masked_fill(~own, -1e9).argmax(1) == test_labels).sum().item() / len(test_labels)
        assert metrics["acc_matrix"][task][2] == pytest.approx(cil, abs=1e-9)
        assert metrics["til_acc_matrix"][task][2] == pytest.approx(til, abs=1e-9)


def test_a_second_method_evaluates_from_its_checkpoints(simplecil_run):
    _, out, metrics = simplecil_run
    again = evaluate_run(out)
    assert again["acc_matrix"] == metrics["acc_matrix"] and again["til_acc_matrix"] == metrics["til_acc_matrix"]


def test_a_checkpoint_of_another_method_is_refused(simplecil_run, tmp_path):
    import shutil

    _, out, _ = simplecil_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for last in (copy / "checkpoints").glob("task_02.pt*"):  # not finished any more: it would resume from task 2
        last.unlink()
    with pytest.raises(RunError, match="written by simplecil, not by method 'norga'"):
        run_training(load_config(SMOKE), copy, force=True)


def test_the_shared_loop_sums_pluggable_terms_and_names_the_lr_key_on_divergence():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    terms = {"ce": lambda out: torch.nn.functional.cross_entropy(out["logits"], out["labels"]),
             "l2": lambda out: 0.01 * layer.weight.pow(2).sum()}
    history = run_stage(Stage("demo", 0, 5, optimizer, train_modules=[layer]), lambda epoch: [(x, y)],
                        lambda b: {"logits": layer(b[0]), "labels": b[1]}, terms)
    assert [set(h) for h in history] == [{"loss", "ce", "l2"}] * 5
    assert all(h["loss"] == pytest.approx(h["ce"] + h["l2"]) for h in history)
    assert history[-1]["loss"] < history[0]["loss"]
    bad = {"nan": lambda out: out["logits"].sum() * float("nan")}
    with pytest.raises(NonFiniteLoss, match="stage demo, task 2, epoch 0.*lower method.demo.lr"):
        run_stage(Stage("demo", 2, 1, optimizer, lr_key="method.demo.lr"), lambda e: [(x, y)],
                  lambda b: {"logits": layer(b[0])}, bad)
    with pytest.raises(ValueError, match="no loss terms"):
        run_stage(Stage("demo", 0, 1, optimizer), lambda e: [], lambda b: {}, {})


GENERIC = ["norga/engine/task_loop.py", "norga/engine/evaluate.py", "norga/engine/lifecycle.py",
           "norga/engine/run_folder.py", "norga/reports/metrics.py", "norga/toolkit/training.py"]
METHOD_TOKENS = {"gate", "gates", "wtp", "tap", "hideprompt", "pool", "alpha", "tau"}  # whole words
METHOD_PARTS = ("tii_head", "task_prompt", "prompt_length", "hide-prompt", "norga_gate")


@pytest.mark.parametrize("path", GENERIC)
def test_the_generic_layer_never_names_a_method_a_gate_or_a_head(path):
    """Identifiers and non-docstring strings of the task loop, evaluation, run files and metrics."""
    tree = ast.parse((REPO_ROOT / path).read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
    def names_internals(word: str) -> bool:
        lowered = word.lower()
        return bool(set(re.split(r"[^a-z0-9]+", lowered)) & METHOD_TOKENS) or any(p in lowered for p in METHOD_PARTS)

    offending = sorted({w for w in words if names_internals(w)})
    assert offending == [], f"{path} names method internals: {offending}"


def test_simplecil_config_dataclass_is_what_config_yaml_stores(simplecil_run):
    import yaml

    _, out, _ = simplecil_run
    stored = yaml.safe_load((out / "config.yaml").read_text())
    assert stored["method"] == dataclasses.asdict(load_config(SMOKE, ["method={name: simplecil}"]).method)
