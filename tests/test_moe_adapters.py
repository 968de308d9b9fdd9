"""LoRAMoE / MH-MoE adapters (routing by hand, explicit formulas, timm parity), N_eff by hand, and smoke runs."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import (load_run_method, tiny_vit)
from faults import assert_kill_then_resume_matches, tiny_method_args
from norga.config import ConfigError, load_config
from norga.engine import run_training
from norga.toolkit.routing import (composition_table, effective_compositions, mass_quantile_bins,
                                     mass_weighted_n_eff, position_buckets, route_rows, route_statistics)
from norga.models.moe_adapters import HeadwiseLoRAMoE, attach_adapters, lora_moe, top_k_routing
from conftest import LORA, MH, SMOKE, TINY_DATA


def randomised(layer: HeadwiseLoRAMoE, seed: int = 0) -> HeadwiseLoRAMoE:
    """``layer`` with non-zero up-projections (a fresh layer's are zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.up.copy_(torch.randn(layer.up.shape, generator=g))
    return layer


# ---- routing and the layer -----------------------------------------------------------------------------------
def test_top_k_routing_by_hand():
    chosen, weights = top_k_routing(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
    assert chosen.tolist() == [[1, 2]]
    e = math.e
    torch.testing.assert_close(weights, torch.tensor([[e / (e + 1), 1 / (e + 1)]]))  # softmax over the selected
    assert top_k_routing(torch.tensor([[0.5, 2.0]]), 1)[1].tolist() == [[1.0]]  # top-1: weight 1
    with pytest.raises(ValueError, match="top_k must be in 1..2"):
        top_k_routing(torch.zeros(1, 2), 3)


@torch.no_grad()
def explicit_headwise(layer: HeadwiseLoRAMoE, h: torch.Tensor) -> torch.Tensor:
    """Eqs. 12-16 token by token, head by head, expert by expert."""
    H, part = layer.heads, layer.dim // layer.heads
    out = torch.zeros_like(h)
    for n in range(len(h)):
        for m in range(H):
            h_m = h[n, m * part:(m + 1) * part]
            logits = layer.router[m] @ h_m
            chosen = sorted(range(layer.experts), key=lambda j: -float(logits[j]))[: layer.top_k]
            z = torch.stack([logits[j] for j in chosen])
            alpha = torch.exp(z) / torch.exp(z).sum()
            for a, j in zip(alpha, chosen):
                out[n] += a * (layer.up[m, j] @ (layer.down[m, j] @ h_m))
    return out


def explicit_lora_moe(router: torch.Tensor, down: torch.Tensor, up: torch.Tensor, k: int, h: torch.Tensor):
    """LoRAMoE from its own definition: router (K, D), experts B_j A_j (D x r)(r x D), top-k renormalised."""
    logits = h @ router.T
    values, chosen = logits.topk(k, dim=-1)
    alpha = values.softmax(-1)
    return torch.stack([sum(alpha[n, i] * (up[j] @ (down[j] @ h[n])) for i, j in enumerate(chosen[n].tolist()))
                        for n in range(len(h))])


@pytest.mark.parametrize("heads,experts,top_k", [(1, 4, 1), (2, 3, 2), (4, 4, 1)])
def test_the_layer_is_the_explicit_formula(heads, experts, top_k):
    torch.manual_seed(0)
    layer = randomised(HeadwiseLoRAMoE(8, heads, experts, top_k, rank=3))
    h = torch.randn(5, 8)
    torch.testing.assert_close(layer(h), explicit_headwise(layer, h), rtol=1e-5, atol=1e-5)


def test_one_head_equals_a_lora_moe_layer_with_the_same_weights():
    torch.manual_seed(1)
    layer = randomised(lora_moe(8, experts=4, top_k=2, rank=3))
    h = torch.randn(6, 8)
    expected = explicit_lora_moe(layer.router[0], layer.down[0], layer.up[0], 2, h)
    torch.testing.assert_close(layer(h), expected, rtol=1e-5, atol=1e-5)
    mh = HeadwiseLoRAMoE(8, 1, 4, 2, 3)
    mh.load_state_dict(layer.state_dict())
    torch.testing.assert_close(mh(h), layer(h))


def test_changing_one_slice_changes_only_that_heads_route():
    torch.manual_seed(2)
    layer = HeadwiseLoRAMoE(8, 4, 6, 1, 2)
    h = torch.randn(20, 8)
    _, before, _ = layer.route(h)
    changed = h.clone()
    changed[:, 2:4] = torch.randn(20, 2) * 5  # slice m = 1 only
    _, after, _ = layer.route(changed)
    assert torch.equal(before[:, [0, 2, 3]], after[:, [0, 2, 3]])
    assert not torch.equal(before[:, 1], after[:, 1])


def test_fresh_adapters_leave_timm_output_unchanged_and_errors():
    vit = tiny_vit()
    x = torch.randn(2, 3, 32, 32)
    reference = vit.forward_features(x)
    adapters = attach_adapters(vit, [0, 1], lambda: HeadwiseLoRAMoE(64, 2, 3, 1, 2))
    assert torch.equal(vit.forward_features(x), reference)  # B = 0: exactly timm's output
    randomised(adapters["1"])
    assert not torch.allclose(vit.forward_features(x), reference)
    with pytest.raises(ValueError, match="block 0 already has an adapter"):
        attach_adapters(vit, [0], lambda: HeadwiseLoRAMoE(64, 2, 3, 1, 2))
    with pytest.raises(ValueError, match="3 does not divide 64"):
        HeadwiseLoRAMoE(64, 3, 3, 1, 2)


# ---- N_eff and route statistics ----------------------------------------------------------------------------------
def test_n_eff_by_hand():
    one_each = composition_table(torch.tensor([0, 0, 1, 1, 2]), torch.tensor([5, 5, 7, 7, 9]))
    assert effective_compositions(one_each).tolist() == [1.0, 1.0, 1.0]
    uniform = composition_table(torch.zeros(12, dtype=torch.long), torch.arange(12) % 3)  # 3 compositions equally
    assert effective_compositions(uniform).tolist() == pytest.approx([3.0])
    mixed = composition_table(torch.zeros(4, dtype=torch.long), torch.tensor([0, 0, 1, 2]))  # p = 1/2, 1/4, 1/4
    assert effective_compositions(mixed).tolist() == pytest.approx([1 / (0.25 + 0.0625 + 0.0625)])


def test_route_statistics_mass_loss_change_and_bins_by_hand():
    routes = torch.tensor([0, 0, 0, 1])  # route 0: compositions a, a, b; route 1: c
    comps = torch.tensor([[0, 1], [0, 1], [1, 1], [2, 0]])  # factor rows
    stats = route_statistics(routes, comps, loss_change=torch.tensor([1.0, 2.0, 3.0, -1.0]))
    assert stats["mass"] == [0.75, 0.25] and stats["tokens"] == [3, 1]
    assert stats["n_eff"] == pytest.approx([1 / ((2 / 3) ** 2 + (1 / 3) ** 2), 1.0])
    assert stats["delta_loss"] == pytest.approx([2.0, -1.0])
    assert mass_weighted_n_eff(stats) == pytest.approx(0.75 * 1.8 + 0.25)
    bins = mass_quantile_bins(stats, bins=2)
    assert [b["delta_loss"] for b in bins] == pytest.approx([-1.0, 2.0])  # sorted by N_eff: route 1 first
    assert [b["mass"] for b in bins] == [0.25, 0.75]


def test_route_rows_and_position_buckets():
    selected = torch.tensor([[[2, 0], [1, 3]], [[0, 2], [3, 1]]])  # (N=2, H=2, k=2): same sets, other order
    assert torch.equal(route_rows(selected, head=0), torch.tensor([[0, 2], [0, 2]]))
    assert torch.equal(route_rows(selected), torch.tensor([[0, 2, 1, 3], [0, 2, 1, 3]]))
    assert position_buckets(1, 4).tolist() == [0, 1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4]


# ---- the methods --------------------------------------------------------------------------------------------------


def test_adapters_train_backbone_stays_frozen_and_metrics_describe_it(moe_run):
    cfg, out, metrics = moe_run
    _, _, method = load_run_method(out)
    assert all(float(a.up.detach().abs().sum()) > 0 for a in method.adapters.values())  # the experts did train
    backbone = [p for name, p in method.model.vit.named_parameters() if ".adapter." not in name]
    assert backbone and not any(p.requires_grad for p in backbone)
    described = metrics["method"]
    heads = cfg.method.heads if cfg.method.name == "mh_moe" else 1
    dim = method.model.embed_dim
    assert described["activated_parameters_per_token_and_layer"] == heads * cfg.method.top_k * cfg.method.rank * (
        dim // heads + dim)
    assert described["routing_outcomes_per_layer"] == math.comb(cfg.method.experts, cfg.method.top_k) ** heads
    assert metrics["completed_tasks"] == 3 and metrics["FA"] > 1 / 6


def test_route_report_is_stored_plotted_and_consistent(moe_run, capsys):
    import json

    from norga.commands.cli import main as norga

    cfg, out, _ = moe_run
    assert norga(["routes", "--run", str(out), "--bins", "3"]) == 0
    assert "path-wise" in capsys.readouterr().out
    report = json.loads((out / "routes.json").read_text())
    assert (out / "plots" / "routes.png").stat().st_size > 0
    assert report["old_tasks"] == [0, 1] and sorted(report["layers"], key=int) == ["0", "1"]
    assert report["tokens"] == 2 * 12 * 65  # 2 old tasks x 12 test images x (1 + 8 x 8 patches) tokens
    for kind in ("path_wise", "route_wise"):  # routes of both layers pooled, each layer's mass halved
        assert sum(b["mass"] for b in report["pooled_bins"][kind]) == pytest.approx(1.0)
    compositions = 2 * 2 * 5  # tasks x classes per task x position buckets
    for layer in report["layers"].values():
        for kind in ("path_wise", "route_wise"):
            assert 1.0 <= layer[kind]["n_eff"] <= compositions
            assert sum(b["mass"] for b in layer[kind]["bins"]) == pytest.approx(1.0)
        if cfg.method.name == "lora_moe":  # one head: the route is the path
            assert layer["route_wise"]["n_eff"] == pytest.approx(layer["path_wise"]["n_eff"])
        else:
            assert layer["path_wise"]["routes"] <= 3 ** 2 and len(layer["route_wise"]["n_eff_per_head"]) == 2


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.heads=3 does not divide the backbone width 64"):
        run_training(load_config(SMOKE, TINY_DATA + [MH.replace("heads: 2", "heads: 3")]), "/nonexistent/x")
    with pytest.raises(ConfigError, match="method.top_k=4 exceeds method.experts=3"):
        run_training(load_config(SMOKE, TINY_DATA + [LORA.replace("top_k: 2", "top_k: 4")]), "/nonexistent/x")


@pytest.fixture(scope="module")
def mh_reference(tmp_path_factory):
    """The uninterrupted tiny MH-MoE run of the kill tests, trained once for both of them."""
    from norga.commands.cli import main as norga

    out = tmp_path_factory.mktemp("ref") / "mh_moe"
    assert norga(["train", *tiny_method_args(out, MH)]) == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["bar:moe:1", "bar:align:1"])
def test_kill_and_resume_gives_the_uninterrupted_metrics(spec, mh_reference, tmp_path):
    assert_kill_then_resume_matches(lambda out: tiny_method_args(out, MH), spec, tmp_path, mh_reference)


def test_routes_figure_axes_fit_the_blocks_and_the_bins(tmp_path, monkeypatch):
    """Left: a tick per adapted block, half a block of margin; right: the x axis spans every bin's N_eff range."""
    from norga.engine import route_report

    drawn = {}
    monkeypatch.setattr(route_report, "save_png", lambda fig, path, *where: drawn.setdefault("fig", fig))
    layer = {kind: {"n_eff": n} for kind, n in (("path_wise", 3.0), ("route_wise", 4.0))}
    bins = [{"n_eff_min": 2.0, "n_eff_max": 6.0, "delta_loss": -0.1, "delta_loss_se": float("nan")},
            {"n_eff_min": 6.5, "n_eff_max": 13.0, "delta_loss": 0.2, "delta_loss_se": 0.05}]
    route_report._plot({"layers": {"3": layer, "7": layer, "11": layer},
                        "pooled_bins": {"path_wise": bins, "route_wise": bins}}, tmp_path / "routes.png")
    left, right = drawn["fig"].axes
    assert list(left.get_xticks()) == [3, 7, 11] and left.get_xlim() == (2.5, 11.5)
    low, high = right.get_xlim()
    assert low <= 2.0 and high >= 13.0 and high - low < 1.2 * (13.0 - 2.0)  # the bins, not much more
