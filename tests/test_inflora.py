"""InfLoRA (norga/methods/inflora.py) and the LoRA-on-qkv wrapper it shares with SD-LoRA (norga/models/lora_qkv.py):
the wrapper against its explicit formula and against timm, the designed down-projection against the stored
subspace, the DualGPM memory update by hand, only B training, and the smoke run through ``norga train``."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from conftest import (assert_predictions_per_sample, assert_reevaluation_identical, build_run_parts,
                      checkpoint_method_state, loaders_of, tiny_vit)
from norga.commands.cli import main as norga
from norga.config import ConfigError, load_config
from norga.methods.inflora import (design_down, first_memory, grow_memory, settle_memory, threshold_at,
                                   update_memory)
from norga.models.lora_qkv import LoRAQKV, attach_lora_qkv

INFLORA_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "inflora.yaml"


def projector(basis: torch.Tensor) -> torch.Tensor:
    return basis @ basis.T


def rotation(dim: int, seed: int = 0) -> torch.Tensor:
    """A random orthogonal (dim, dim) matrix in float64."""
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))[0]


# ---- the wrapper -------------------------------------------------------------------------------------------------
def randomise(wrapper: LoRAQKV, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for branch in wrapper.branches:
            branch.down.copy_(torch.randn(branch.down.shape, generator=g))
            branch.up.copy_(torch.randn(branch.up.shape, generator=g))


def test_lora_output_is_x_wT_plus_x_aT_bT_on_the_targets_only():
    vit = tiny_vit()
    qkv = vit.blocks[0].attn.qkv
    wrapper = LoRAQKV(qkv, ("k", "v"))
    wrapper.add_branch(3)
    wrapper.add_branch(2)
    randomise(wrapper)
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1))
    expected = x @ qkv.weight.T + qkv.bias
    for p, slot in enumerate((1, 2)):  # k is the second block of 64 outputs, v the third
        for branch in wrapper.branches:
            a, b = branch.down[p], branch.up[p]
            expected[..., slot * 64:(slot + 1) * 64] += x @ a.T @ b.T
    torch.testing.assert_close(wrapper(x), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wrapper(x)[..., :64], qkv(x)[..., :64])  # q untouched


def test_wrapped_qkv_equals_timm_when_b_is_zero():
    vit, reference = tiny_vit(seed=3), tiny_vit(seed=3)
    wrappers = attach_lora_qkv(vit, [0, 1], ("k", "v"))
    for wrapper in wrappers.values():
        branch = wrapper.add_branch(4)
        torch.nn.init.normal_(branch.down)  # any A: a zero B adds nothing
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    assert torch.equal(vit.blocks[0].attn.qkv(torch.ones(1, 4, 64)), reference.blocks[0].attn.qkv(torch.ones(1, 4, 64)))
    assert torch.equal(vit.forward_features(x), reference.forward_features(x))
    with pytest.raises(ValueError, match="already has LoRA branches"):
        attach_lora_qkv(vit, [0], ("k", "v"))


def test_wrapper_records_the_gram_matrix_of_its_inputs():
    wrapper = LoRAQKV(tiny_vit().blocks[0].attn.qkv, ("k", "v"))
    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(4))
    wrapper.record = True
    wrapper(x)
    flat = x.reshape(-1, 64).double()
    torch.testing.assert_close(wrapper.gram, flat.T @ flat)
    assert wrapper.tokens == 6


# ---- the designed down-projection ----------------------------------------------------------------------------
def test_designed_down_projection_is_orthogonal_to_the_stored_subspace():
    dim, g = 16, torch.Generator().manual_seed(5)
    h = torch.randn(dim, 40, generator=g, dtype=torch.float64)
    cov = h @ h.T / 40
    q = rotation(dim)
    old, rest = q[:, :5], q[:, 5:]
    for memory in ((old, "remove"), (rest, "retain")):  # the same old subspace, stored either way
        down = design_down(cov, memory, 4)
        assert down.shape == (4, dim)
        assert (down @ old).abs().max() < 1e-12  # orthogonal to the old subspace to float64 precision
        torch.testing.assert_close(down @ down.T, torch.eye(4, dtype=torch.float64))
    # without memory: the top-4 eigenvectors of the representation matrix
    top = torch.linalg.eigh(cov)[1][:, -4:]
    torch.testing.assert_close(projector(design_down(cov, None, 4).T), projector(top))
    # with memory: the top-4 left singular vectors of (I - M M^T) R
    residual = cov - projector(old) @ cov
    u = torch.linalg.svd(residual)[0][:, :4]
    torch.testing.assert_close(projector(design_down(cov, (old, "remove"), 4).T), projector(u))


# ---- the memory update (DualGPM, official update_DualGPM) ------------------------------------------------------
def test_first_memory_by_hand():
    q = rotation(6, seed=1)
    activation = q @ torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5, 0.1, 0.1], dtype=torch.float64)) @ q.T
    # squared singular values 9, 4, 1, .25, .01, .01 (total 14.27): cumulative ratios .631, .911, .981, ...
    basis, kind = first_memory(activation, 0.95)  # two ratios below 0.95 -> r = 2 < 6 / 2
    assert kind == "remove" and basis.shape == (6, 2)
    torch.testing.assert_close(projector(basis), projector(q[:, :2]))
    basis, kind = first_memory(activation, 0.99)  # three below 0.99 -> r = 3 = 6 / 2: stored as the complement
    assert kind == "retain"
    torch.testing.assert_close(projector(basis), projector(q[:, 3:]))
    assert first_memory(activation, 0.1)[0].shape == (6, 1)  # at least one direction


def test_grow_memory_remove_by_hand():
    e = torch.eye(6, dtype=torch.float64)
    activation = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5, 0.0, 0.0], dtype=torch.float64))
    # total 9 + 4 + 1 + .25 = 14.25; e1 is stored: accumulated 9 / 14.25 = .632; + 4 / 14.25 -> .912 (< .95);
    # + 1 / 14.25 -> .982 >= .95: two directions added, e2 and e3
    basis, kind = grow_memory((e[:, :1], "remove"), activation, 0.95)
    assert kind == "remove" and basis.shape == (6, 3)
    torch.testing.assert_close(projector(basis), projector(e[:, :3]))
    same, _ = grow_memory((e[:, :1], "remove"), activation, 0.6)  # .632 already reaches 0.6: nothing added
    assert torch.equal(same, e[:, :1])


def test_grow_memory_retain_by_hand():
    e = torch.eye(6, dtype=torch.float64)
    activation = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.5, 0.2, 0.0], dtype=torch.float64))
    # old subspace e1..e3, the complement e4..e6 stored; total 14.29; energy in the complement (.25 + .04) / 14.29
    # = .0203 >= 1 - .99: e4 leaves (-> .0028 < .01, stop): the complement becomes span(e5, e6)
    basis, kind = grow_memory((e[:, 3:], "retain"), activation, 0.99)
    assert kind == "retain" and basis.shape == (6, 2)
    torch.testing.assert_close(projector(basis), projector(e[:, 4:]))


def test_settle_switches_a_large_memory_to_its_complement_and_threshold_grows():
    e = torch.eye(6, dtype=torch.float64)
    basis, kind = settle_memory((e[:, :4], "remove"))
    assert kind == "retain" and basis.shape == (6, 2)
    torch.testing.assert_close(projector(basis), projector(e[:, 4:]))
    assert settle_memory((e[:, :3], "remove"))[1] == "remove"
    assert update_memory(None, torch.diag(torch.tensor([1.0, 0, 0, 0, 0, 0], dtype=torch.float64)), 0.9)[1] == "remove"
    assert threshold_at(0, 10, 0.95, 1.0) == 0.95
    assert threshold_at(5, 10, 0.95, 1.0) == pytest.approx(0.975)


# ---- training: only B trains -------------------------------------------------------------------------------------
def test_only_b_trains_and_old_branches_stay(tmp_path):
    cfg = load_config(INFLORA_SMOKE, ["method.epochs=1"])
    cfg, bench, method = build_run_parts(cfg)
    seen = {}
    original = method._train

    def spy(task, loaders, branches):
        seen[task] = [(b.down.detach().clone(), b.up.detach().clone()) for b in branches]
        old = [(b.down.detach().clone(), b.up.detach().clone()) for w in method.wrappers.values()
               for b in list(w.branches)[:-1]]
        original(task, loaders, branches)
        seen[f"old{task}"] = old
        seen[f"after{task}"] = [(b.down.detach().clone(), b.up.detach().clone()) for b in branches]

    method._train = spy
    for task in range(2):
        method.learn_task(task, loaders_of(cfg, bench, method, task))
        for (a0, b0), (a1, b1) in zip(seen[task], seen[f"after{task}"]):
            assert torch.equal(a0, a1) and not torch.equal(b0, b1)  # A fixed, B trained
            assert not b0.abs().any()  # B starts at zero
    old_after = [(b.down, b.up) for w in method.wrappers.values() for b in list(w.branches)[:1]]
    for (a0, b0), (a1, b1) in zip(seen["after0"], old_after):  # task 0's branch after task 1
        assert torch.equal(a0, a1) and torch.equal(b0, b1)
    backbone = [p for n, p in method.model.vit.named_parameters() if ".branches." not in n]
    assert backbone and not any(p.requires_grad for p in backbone)


# ---- the smoke run ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inflora_run(tmp_path_factory):
    import json

    out = tmp_path_factory.mktemp("runs") / "inflora"
    assert norga(["train", "--config", str(INFLORA_SMOKE), "--output-dir", str(out)]) == 0
    return load_config(out / "config.yaml"), out, json.loads((out / "metrics.json").read_text())


def test_designed_a_of_the_run_is_orthogonal_to_the_memory_before_it(inflora_run):
    cfg, out, metrics = inflora_run
    states = [checkpoint_method_state(out, t) for t in range(3)]
    scale = cfg.method.down_scale
    for t in (1, 2):
        for key, basis in states[t - 1]["memory"].items():
            down = states[t]["branches"][key][t]["down"].double() / scale  # (2, r, D): k and v share A_t
            assert torch.equal(down[0], down[1])
            old = basis.double() if states[t - 1]["kinds"][key] == "remove" else \
                torch.linalg.svd(basis.double(), full_matrices=True)[0][:, basis.shape[1]:]
            assert (down[0] @ old).abs().max() < 1e-5  # float32 storage of A
            for s in range(t):  # earlier branches unchanged by later tasks
                assert torch.equal(states[t]["branches"][key][s]["down"], states[s]["branches"][key][s]["down"])
                assert torch.equal(states[t]["branches"][key][s]["up"], states[s]["branches"][key][s]["up"])
    assert metrics["method"]["branches"] == 3 and metrics["completed_tasks"] == 3


def test_run_is_reevaluable_and_per_sample(inflora_run):
    cfg, out, metrics = inflora_run
    assert_reevaluation_identical(out, metrics)
    assert_predictions_per_sample(cfg, out, 1)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.threshold_end"):
        load_config(INFLORA_SMOKE, ["method.threshold_end=0.9"])
    with pytest.raises(ConfigError, match="method.lora_layers"):
        build_run_parts(load_config(INFLORA_SMOKE, ["method.lora_layers=[0, 5]"]))


@pytest.mark.slow
def test_kill_and_resume_gives_the_uninterrupted_metrics(tmp_path):
    from faults import assert_kill_then_resume_matches, tiny_method_args

    method = "method={name: inflora, rank: 4, epochs: 2, batch_size: 16, lr: 0.01}"
    assert_kill_then_resume_matches(lambda out: tiny_method_args(out, method), "bar:inflora:1", tmp_path)


def test_paper_design_takes_the_projected_inputs_and_differs_from_task_1_on():
    """``design: inputs`` = the top left singular vectors of P H (the paper's eq. 6-8), computed explicitly from
    H; ``covariance`` = those of P H H^T / n (the official code); equal without memory, different with one."""
    dim, n, g = 16, 40, torch.Generator().manual_seed(7)
    h = (torch.randn(dim, n, generator=g, dtype=torch.float64)
         * torch.linspace(3, 0.2, dim, dtype=torch.float64)[:, None])
    cov = h @ h.T / n
    q = rotation(dim, seed=3)
    old, rest = q[:, :5], q[:, 5:]
    torch.testing.assert_close(projector(design_down(cov, None, 4, "inputs").T),
                               projector(design_down(cov, None, 4, "covariance").T))
    paper = torch.linalg.svd(h - projector(old) @ h)[0][:, :4]  # Ĥ = H - M M^T H, eq. 6
    for memory in ((old, "remove"), (rest, "retain")):  # the same old subspace stored either way
        down = design_down(cov, memory, 4, "inputs")
        torch.testing.assert_close(projector(down.T), projector(paper))
        assert (down @ old).abs().max() < 1e-12
    official = design_down(cov, (old, "remove"), 4, "covariance")
    assert (projector(official.T) - projector(paper)).abs().max() > 1e-3  # the two forms are different vectors
    with pytest.raises(ValueError, match="unknown design form 'input'; choose covariance or inputs"):
        design_down(cov, (old, "remove"), 4, "input")


def test_the_configured_design_form_reaches_the_method(monkeypatch):
    """``method.design`` is what the method passes to design_down for every wrapped block."""
    import norga.methods.inflora as inflora_module

    forms = []

    def spy(cov, memory, rank, form="covariance"):
        forms.append(form)
        return design_down(cov, memory, rank, form)

    monkeypatch.setattr(inflora_module, "design_down", spy)
    cfg, bench, method = build_run_parts(load_config(INFLORA_SMOKE, ["method.epochs=0", "method.design=inputs"]))
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    assert forms and set(forms) == {"inputs"} and len(forms) == len(method.wrappers)


@pytest.mark.parametrize("stepping", ["timm", "torch"])
def test_lr_per_epoch_follows_the_official_cosine_schedule(monkeypatch, stepping):
    """The official CosineSchedule leaves last_epoch at -1 after construction, so with step() after every epoch,
    epoch e trains at lr cos(99 pi max(e - 1, 0) / (200 (E - 1))): epochs 0 and 1 at lr (``schedule_stepping: timm``,
    the default); ``torch`` trains epoch e at the value of e."""
    seen = []
    adam_step = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return adam_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    epochs, lr = 4, 0.01
    cfg, bench, method = build_run_parts(load_config(INFLORA_SMOKE, [
        f"method.epochs={epochs}", f"method.lr={lr}", "method.schedule=coda_cosine",
        f"method.schedule_stepping={stepping}"]))
    loaders = loaders_of(cfg, bench, method, 0)
    method.learn_task(0, loaders)
    steps = len(loaders.train)
    per_epoch = [seen[e * steps:(e + 1) * steps] for e in range(epochs)]
    index = [max(e - 1, 0) for e in range(epochs)] if stepping == "timm" else list(range(epochs))
    expected = [lr * math.cos(99 * math.pi * i / (200 * (epochs - 1))) for i in index]
    assert len(seen) == epochs * steps
    for values, value in zip(per_epoch, expected):
        assert values == pytest.approx([value] * steps, rel=1e-12)
