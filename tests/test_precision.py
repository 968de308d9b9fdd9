"""Mixed precision, SDPA head-dim padding and device options (issue: fast on GPUs), tested on the CPU.

bf16 autocast on the CPU follows the same code path as on CUDA (torch.autocast with the device type);
fp16 autocast and the loss scaler run on the CPU too. Tolerance: bf16 keeps 8 mantissa bits (relative
rounding 2^-9 ~ 0.2% per operation), so after a few blocks of matmuls, softmax and LayerNorm errors of a
few 1e-3 are expected. Measured (tiny 3-block ViT, L = 5): output 0.43% (linear) / 0.39% (NoRGa) of its
norm; gradients up to 0.55% (linear) / 1.7% (NoRGa: alpha and tau sum bf16 terms over every score). We
allow 3e-2 relative to the norm, for the output and every gradient."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_vit
from norga.config import ConfigError, load_config
from norga.toolkit.devices import auto_workers, loader_options, resolve_device
from norga.toolkit.training import Stage, run_stage
from norga.models import PromptedViT, PromptPool
from norga.models import prefix_attention
from norga.models.precision import amp_mode, current_mode
from norga.models.prefix_attention import padded_head_dim
from conftest import SMOKE

BF16_RELATIVE_TOLERANCE = 3e-2


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _forward_backward(path: str, mode: str, gate: str = "norga"):
    options = {"activation": "tanh"} if gate == "norga" else {}
    model = PromptedViT(tiny_vit(seed=1, depth=3), prompt_layers=(0, 2), gate=gate, path=path, **options)
    model.freeze_backbone()
    for p in model.gate_parameters():
        p.data.fill_(0.7)
    torch.manual_seed(2)
    pool = PromptPool(3, 2, 5, model.num_heads, model.head_dim)  # L = 5: head dim 32 + 5 = 37 -> padded to 40
    x = torch.randn(4, 3, 32, 32)
    with amp_mode(mode):
        out = model(x, pool.gather([0, 2, 1, 1]))
    (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
    grads = [p.grad for p in pool.prompts] + [p.grad for p in model.gate_parameters()]
    return out.detach(), grads


@pytest.mark.parametrize("gate", ["linear", "norga"])
def test_bf16_fast_path_is_close_to_the_fp32_explicit_path_forward_and_backward(gate):
    out, grads = _forward_backward("fast", "bf16", gate)
    ref, ref_grads = _forward_backward("explicit", "off", gate)
    assert out.dtype == torch.float32  # features leave the backbone in fp32
    assert 0 < _relative(out, ref) < BF16_RELATIVE_TOLERANCE  # > 0: autocast did run in bf16
    for g, r in zip(grads, ref_grads):
        assert g.dtype == torch.float32 and _relative(g, r) < BF16_RELATIVE_TOLERANCE


def test_padding_the_appended_dimensions_changes_nothing_and_reaches_a_multiple_of_8(monkeypatch):
    seen = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, **kw):
        seen.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(prefix_attention.F, "scaled_dot_product_attention", recording)
    padded, _ = _forward_backward("fast", "off")
    assert seen.count((40, 40, 40)) == 2 and set(seen) == {(40, 40, 40), (32, 32, 32)}  # prefixed: 32 + 5 -> 40
    monkeypatch.setattr(prefix_attention, "padded_head_dim", lambda dim, multiple=8: dim)
    seen.clear()
    unpadded, _ = _forward_backward("fast", "off")
    assert seen.count((37, 37, 37)) == 2
    assert torch.allclose(padded, unpadded, atol=1e-6, rtol=0)
    assert [padded_head_dim(d) for d in (64, 69, 72, 1)] == [64, 72, 72, 8]


def test_fp16_training_steps_go_through_a_loss_scaler(monkeypatch):
    scalers = []
    real = torch.amp.GradScaler

    def recording(*args, **kw):
        scalers.append(real(*args, **kw))
        return scalers[-1]

    monkeypatch.setattr(torch.amp, "GradScaler", recording)
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([w], lr=0.1)
    with amp_mode("fp16"):
        run_stage(Stage("demo", 0, 2, optimizer, clip=1.0, clip_params=[w]), batches=lambda e: [0, 1],
                  forward=lambda b: {"loss": (w * 2.0).sum()}, terms={"l": lambda out: out["loss"]})
    assert len(scalers) == 1 and scalers[0].get_scale() > 1  # scaled steps, and the scale was used
    # 4 steps of the true gradient clipped to norm 1
    assert torch.allclose(w.detach(), torch.full((3,), 1 - 4 * 0.1 / 3 ** 0.5))
    assert current_mode() == "off"


def test_amp_bf16_run_trains_and_re_evaluates_identically(tmp_path):
    from norga.engine import evaluate_run, run_training

    cfg = load_config(SMOKE, ["amp=bf16", "data.num_tasks=2", "data.classes_per_task=2",
                              "data.options={num_classes: 4, train_per_class: 8, test_per_class: 4}"])
    metrics = run_training(cfg, tmp_path / "run")
    again = evaluate_run(tmp_path / "run")
    assert metrics["completed_tasks"] == 2 and again["acc_matrix"] == metrics["acc_matrix"]


def test_device_and_worker_options():
    assert load_config(None, ["device=cuda:1"]).device == "cuda:1"
    with pytest.raises(ConfigError, match="device: expected auto, cpu, cuda or cuda:K"):
        load_config(None, ["device=gpu0"])
    with pytest.raises(ConfigError, match="data.num_workers: expected an integer >= 0 or 'auto'"):
        load_config(None, ["data.num_workers=-2"])
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda:0")
    assert [auto_workers(n) for n in (1, 2, 4, 64)] == [0, 1, 3, 8]
    options = loader_options(load_config(None, ["device=cpu", "data.num_workers=auto"]))
    assert options["pin_memory"] is False and options["persistent_workers"] == (options["num_workers"] > 0)
