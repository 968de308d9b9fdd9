"""``compile:``: the backbone forward through torch.compile — wiring (fast) and the compiled numbers (slow)."""
from __future__ import annotations

import pytest
import torch

from conftest import build_run_parts
from faults import SMOKE, TINY
from norga.config import ConfigError, load_config
from norga.models import compilation


def test_compile_config_values_and_errors():
    assert load_config(None, ["compile=true"]).compile == "default"
    assert load_config(None, ["compile=false"]).compile == "off"
    assert load_config(None, ["compile=max-autotune"]).compile == "max-autotune"
    with pytest.raises(ConfigError, match="compile: 'fast' is not one of"):
        load_config(None, ["compile=fast"])
    with pytest.raises(ValueError, match="unknown compile mode"):
        with compilation.compile_mode("fast"):
            pass


def test_a_run_with_compile_sends_every_backbone_forward_through_torch_compile(tmp_path, monkeypatch):
    """torch.compile replaced by a counting pass-through: the wiring is checked without the compile time."""
    from norga.engine.task_loop import run_training

    calls, modes = {"n": 0}, []

    def fake_compile(fn, mode=None, **kwargs):
        modes.append(mode)

        def counted(*args, **kw):
            calls["n"] += 1
            return fn(*args, **kw)
        return counted

    from norga.models.prompted_vit import PromptedViT

    forwards = {"n": 0}
    features = PromptedViT._features

    def counted_features(self, *args, **kw):
        forwards["n"] += 1
        return features(self, *args, **kw)

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(compilation, "_compiled", {})
    monkeypatch.setattr(PromptedViT, "_features", counted_features)
    overrides = [TINY[i + 1] for i in range(0, len(TINY), 2)] + ["compile=reduce-overhead"]
    metrics = run_training(load_config(SMOKE, overrides), tmp_path / "run")
    assert modes == ["reduce-overhead"]  # compiled once
    assert calls["n"] == forwards["n"] > 10  # every backbone forward of every stage went through it
    assert metrics["completed_tasks"] == 3
    assert compilation.backbone_function() is compilation.backbone_tokens  # the run's mode ends with the run


@pytest.mark.slow
def test_the_compiled_forward_and_gradients_equal_eager():
    """Real torch.compile (inductor, about 1-2 minutes on 2 cores): a prompted forward and the prompt gradient."""
    _, _, method = build_run_parts(load_config(SMOKE))
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    prompt = method.task_prompts[0].detach().clone().requires_grad_(True)
    eager = method.model(images, prompt)
    (eager ** 2).sum().backward()
    eager_grad, prompt.grad = prompt.grad.clone(), None
    with compilation.compile_mode("default"):
        compiled = method.model(images, prompt)
        (compiled ** 2).sum().backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prompt.grad, eager_grad, rtol=1e-4, atol=1e-6)
    assert compilation._compiled  # it did go through torch.compile
