"""Device placement of every registered method (issue #68), on a CPU-only machine.

Each method's smoke config (shortened: 2 tasks, 1 epoch per stage) is trained and evaluated again from its
checkpoints with ``resolve_device`` giving the emulated device of :mod:`device_tracker` (CPU memory, a device of
its own to the tracker): an op mixing host and device tensors, a CPU generator drawing a device tensor, or
``.numpy()`` of a device tensor fails the method's test, naming the norga line. Planted bugs of each kind (a
host class mask, a CPU generator for a device permutation, ``.numpy()`` without ``.cpu()``) show the check bites.

Known placement bugs of norga are listed in :data:`KNOWN_BUGS` (strict expected failures: fixing one makes its
test pass and the strict xfail fail, so the entry is then removed).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import REPO_ROOT
from device_tracker import HOST, VIRTUAL, DeviceTracker
import norga.engine
import norga.gates
import norga.methods
import norga.models
import norga.toolkit
from norga.config import load_config, method_configs
from norga.engine import evaluate_run, run_training
from norga.toolkit import devices

METHODS = sorted(method_configs())
SMOKE_DIR = REPO_ROOT / "configs" / "smoke"
# method -> why its run is expected to fail the placement check (strict: a fix must remove the entry)
KNOWN_BUGS: dict = {}


# ---- the emulated device -------------------------------------------------
def load_run_modules() -> None:
    """Import every module a run may use (so a name bound by ``from .. import f`` exists before it is replaced)."""
    for package in (norga.engine, norga.methods, norga.toolkit, norga.models, norga.gates):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(info.name)


def replace_everywhere(monkeypatch, original, replacement) -> None:
    """Point every norga module's name bound to ``original`` (e.g. imported by name) at ``replacement``."""
    load_run_modules()
    for name, module in list(sys.modules.items()):
        if name == "norga" or name.startswith("norga."):
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, replacement)


@contextlib.contextmanager
def emulated_device(monkeypatch) -> Iterator[DeviceTracker]:
    """``resolve_device`` gives the emulated device (its ``.type`` is still ``cpu``: CPU code paths run) under a
    :class:`DeviceTracker`."""
    original = devices.resolve_device

    def resolve(name: str) -> torch.device:
        return VIRTUAL if original(name).type == "cpu" else original(name)

    replace_everywhere(monkeypatch, original, resolve)
    with DeviceTracker() as tracker:
        yield tracker


# ---- shortened smoke runs --------------------------------------------------
def epoch_overrides(section, prefix: str) -> List[str]:
    """``key=1`` for every epoch count above 1 of a config section (nested), ``warmup_epochs=0``."""
    out = []
    for field in dataclasses.fields(section):
        value, key = getattr(section, field.name), f"{prefix}.{field.name}"
        if dataclasses.is_dataclass(value):
            out += epoch_overrides(value, key)
        elif field.name == "warmup_epochs" and isinstance(value, int) and value > 0:
            out.append(f"{key}=0")
        elif field.name.endswith("epochs") and isinstance(value, int) and value > 1:
            out.append(f"{key}=1")
    return out


def short_smoke(method: str):
    """The method's smoke config with 2 tasks (the second one uses what the first left) and 1 epoch per stage."""
    path = SMOKE_DIR / f"{method}.yaml"
    cfg = load_config(path)
    per_task = cfg.data.classes_per_task
    data = ["data.num_tasks=2", f"data.options.num_classes={2 * per_task}", "data.options.test_per_class=4"]
    return load_config(path, data + epoch_overrides(cfg.method, "method"))


def train_and_reevaluate(method: str, out: Path, monkeypatch) -> DeviceTracker:
    """Train the short smoke run and evaluate it again from its checkpoints, both on the emulated device."""
    cfg = short_smoke(method)
    with emulated_device(monkeypatch) as tracker:
        run_training(cfg, out)
        evaluate_run(out)
    return tracker


def method_params():
    return [pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[m])) if m in KNOWN_BUGS else m
            for m in METHODS]


@pytest.mark.integration
@pytest.mark.parametrize("method", method_params())
def test_every_method_keeps_its_tensors_on_the_run_device(method, tmp_path, monkeypatch):
    tracker = train_and_reevaluate(method, tmp_path / method, monkeypatch)
    tracker.assert_clean()
    assert tracker.marked_any, "nothing was placed on the emulated device: the run did not use it"


# ---- planted bugs in a real run --------------------------------------------
def host_class_mask(num_classes, classes, device=None):
    """Planted: ``class_mask`` that forgets its device (a host mask)."""
    mask = torch.zeros(num_classes, dtype=torch.bool)
    mask[torch.as_tensor(list(classes), dtype=torch.long)] = True
    return mask


def numpy_features(model, loader, device, prompts=None, desc="features"):
    """Planted: ``extract_features`` going to the host through ``.numpy()`` without ``.cpu()``."""
    feats, labels = [], []
    for x, y in loader:
        feats.append(torch.from_numpy(model(x.to(device), prompts).float().detach().numpy().copy()))
        labels.append(torch.as_tensor(y))
    return torch.cat(feats), torch.cat(labels)


def cpu_generator_batches(feats, labels, batch_size, generator, max_batches=None):
    """Planted: ``shuffled_batches`` drawing its permutation on the labels' device from the CPU generator."""
    order = torch.randperm(len(labels), generator=generator, device=labels.device)
    for start in range(0, len(order), batch_size):
        yield feats[order[start:start + batch_size]], labels[order[start:start + batch_size]]


def planted_run(monkeypatch, tmp_path, method: str, module_function: str, planted) -> DeviceTracker:
    """The short smoke run of ``method`` with the norga function ``module:function`` replaced by ``planted``."""
    module, function = module_function.split(":")
    replace_everywhere(monkeypatch, getattr(importlib.import_module(module), function), planted)
    return train_and_reevaluate(method, tmp_path / method, monkeypatch)


@pytest.mark.integration
@pytest.mark.parametrize("method,target,planted,kind", [
    ("slca", "norga.toolkit.heads:class_mask", host_class_mask, "mix"),
    ("simplecil", "norga.toolkit.stages:extract_features", numpy_features, "numpy"),
], ids=["host-mask-mix", "numpy-of-device"])
def test_a_planted_placement_bug_fails_the_run(method, target, planted, kind, tmp_path, monkeypatch):
    tracker = planted_run(monkeypatch, tmp_path, method, target, planted)
    found = tracker.of_kind(kind)
    assert found, f"the planted {kind} bug was not caught"
    assert any("test_device_placement.py" in v.where or "norga/" in v.where for v in found)
    with pytest.raises(AssertionError, match=f"{kind}: "):
        tracker.assert_clean()


def test_a_planted_cpu_generator_for_device_batches_is_caught(monkeypatch):
    """(Not in a whole run: under the emulation the runs' shuffles and Gaussian draws take their CPU branch, as the
    emulated device's ``type`` is ``cpu``.) norga's alignment loop over device pseudo-features, planted."""
    from norga.toolkit import stages, training

    monkeypatch.setattr(stages, "shuffled_batches", cpu_generator_batches)
    with DeviceTracker() as tracker:
        feats, labels = torch.randn(8, 4).to(VIRTUAL), torch.arange(8).to(VIRTUAL)
        head = nn.Linear(4, 8).to(VIRTUAL)
        stages.fit_on_features(head, feats, labels, torch.ones(8, dtype=torch.bool, device=VIRTUAL), 1, 0.1, 4,
                               torch.Generator().manual_seed(0), VIRTUAL)
        list(training.shuffled_batches(feats, labels, 4, torch.Generator()))  # the real one: a host permutation
    assert [v.kind for v in tracker.violations] == ["generator"]
    assert "fit_on_features" in tracker.violations[0].where


# ---- the tracker on its own: what it lets through, what it catches -------------
def test_correct_device_idioms_are_clean():
    with DeviceTracker() as tracker:
        model = nn.Linear(4, 3).to(VIRTUAL)
        x = torch.randn(5, 4)  # a loader's batch: host
        y = model(x.to(VIRTUAL))
        assert y.device == VIRTUAL and tracker.is_device(model.weight) and not tracker.is_device(x)
        z = torch.zeros(5, 3, device=y.device) + y * torch.tensor(2.0)  # device= of a device tensor; a CPU scalar
        z[torch.arange(2)] = 1.0  # host indices into a device tensor
        picked = z[torch.tensor([True, False, True, False, True])]
        noise = torch.randn(5, 3, generator=torch.Generator(device=VIRTUAL).manual_seed(0), device=VIRTUAL)
        host = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)).to(z.device)  # CPU draw, then moved
        arr = (z + noise + host).detach().cpu().numpy()
        assert picked.device == VIRTUAL and z.to("cpu").device == HOST and isinstance(arr, np.ndarray)
        assert torch.as_tensor([1, 2], device=VIRTUAL).device == VIRTUAL and y.to(torch.float64).device == VIRTUAL
        labels = torch.tensor([0, 2, 1]).to(VIRTUAL)
        hot = F.one_hot(labels, 3) * y[:3].detach()  # one_hot's zeros come from inside C++ with host options
        model(x.to(VIRTUAL))[labels].sum().backward()  # index backward: zeros(grad.options()) then index_put
        assert hot.device == VIRTUAL and model.weight.grad.device == VIRTUAL
        torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()
        model(x.to(VIRTUAL)).sum().backward()
        torch.optim.Adam(model.parameters(), lr=0.1).step()
    tracker.assert_clean()
    assert torch.ones(1).device == HOST and torch.Generator is torch._C.Generator  # patches undone


@pytest.mark.parametrize("bug,kind", [
    (lambda d: d + torch.ones(3), "mix"),  # a host tensor (not a scalar) with a device tensor
    (lambda d: torch.cat([d, torch.zeros(3)]), "mix"),
    (lambda d: torch.ones(3)[d.long().clamp(0, 2)], "mix"),  # device indices into a host tensor
    (lambda d: d.index_select(0, torch.tensor([0, 1])), "mix"),  # index_select wants its index on the device
    (lambda d: torch.randn(3, generator=torch.Generator().manual_seed(0), device=d.device), "generator"),
    (lambda d: torch.randperm(3, generator=torch.Generator(), device=VIRTUAL), "generator"),
    (lambda d: d.clone().normal_(generator=torch.Generator()), "generator"),
    (lambda d: torch.multinomial(d.abs() + 1, 2, generator=torch.Generator()), "generator"),
    (lambda d: torch.bernoulli(d.clamp(0, 1), generator=torch.Generator()), "generator"),
    (lambda d: d.numpy(), "numpy"),
    (lambda d: np.asarray(d[1:]), "numpy"),
    (lambda d: d.detach().to(d.device).numpy(), "numpy"),
], ids=["add", "cat", "device-index", "index_select", "randn", "randperm", "normal_", "multinomial", "bernoulli",
        "numpy", "asarray", "to-same-device"])
def test_each_kind_of_placement_bug_is_caught(bug, kind):
    with DeviceTracker() as tracker:
        bug(torch.rand(3).to(VIRTUAL))
    assert [v.kind for v in tracker.violations] == [kind]
    with pytest.raises(AssertionError, match=kind):
        tracker.assert_clean()


def test_raise_at_once_points_at_the_culprit():
    with pytest.raises(AssertionError, match="mix: aten.add.Tensor at tests/test_device_placement.py"):
        with DeviceTracker(raise_at_once=True):
            torch.ones(2).to(VIRTUAL) + torch.ones(2)
