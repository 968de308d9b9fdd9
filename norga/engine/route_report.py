"""``norga routes --run DIR``: N_eff and ΔL_old per route of a finished MoE-adapter run, stored and plotted.

For every old task i (all tasks but the last): the model of checkpoint i (right after
learning task i) routes the tokens of task i's test images and gives each image its
task-incremental loss (cross-entropy over task i's classes); the final checkpoint gives
the loss again. A token's composition is (task, class, position bucket)
(:func:`~norga.toolkit.routing.position_buckets`: class token, 2 x 2 patch regions).
Per adapted layer, over all old tasks' tokens (definitions in :mod:`norga.toolkit.routing`):

* ``path_wise``: the route is the tuple of every head's selected experts (LoRAMoE: its set);
* ``route_wise``: the route is one head's selected set (per head, then averaged; = path-wise for H = 1);

each with the mass-weighted N_eff, the number of routes used and the mass-quantile bins of
N_eff with mean ΔL_old; ``pooled_bins``: the bins over the routes of all layers (each layer's mass
divided by the number of layers), as the paper pools routes across modules for its Fig. 5. Written to
``DIR/routes.json`` and ``DIR/plots/routes.png``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from ..errors import RunError
from ..outputs import Zone, write_output
from ..methods import build_method
from ..reports.plot_scales import figure, save_png
from ..toolkit.devices import resolve_device
from ..toolkit.heads import class_mask, masked_logits
from ..toolkit.routing import mass_quantile_bins, mass_weighted_n_eff, position_buckets, route_rows, route_statistics
from .loaders import test_loader
from .run_folder import RunDir


@torch.no_grad()
def routes_and_losses(method, loader, task: int) -> tuple:
    """(block -> selected experts (N_img * T, H, k), per-image losses (N_img,), labels (N_img,)) of a loader."""
    allowed = class_mask(method.num_classes, method.task_classes[task], method.device)
    method.record_routes(True)
    routes: Dict[int, List[torch.Tensor]] = {}
    losses, labels = [], []
    try:
        for x, y in loader:
            y = torch.as_tensor(y).to(method.device)
            logits = method.predict_logits(x.to(method.device))
            losses.append(F.cross_entropy(masked_logits(logits, allowed), y, reduction="none").cpu())
            labels.append(y.cpu())
            for block, selected in method.last_routes().items():
                routes.setdefault(block, []).append(selected.cpu())
    finally:
        method.record_routes(False)
    return {b: torch.cat(r) for b, r in routes.items()}, torch.cat(losses), torch.cat(labels)


def route_report(run_dir: Path, bins: int = 4) -> dict:
    """Compute, write and plot the route statistics of a finished run (see the module docstring)."""
    from .task_loop import build_data, build_vit, load_run_config, method_state

    run = RunDir(run_dir)
    cfg = load_run_config(run_dir)
    done = run.scan(cfg.data.num_tasks).done
    if done < 2:
        raise RunError(f"{run_dir}: route statistics need at least 2 completed tasks (found {done})")
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, resolve_device(cfg.device))
    if not hasattr(method, "record_routes"):
        raise RunError(f"{run_dir}: method {cfg.method.name!r} has no routed adapters (use lora_moe or mh_moe)")
    load = lambda t: method.load_state_dict(method_state(run.load_checkpoint(t), method, run))  # noqa: E731
    old = list(range(done - 1))
    recorded = []
    for task in old:
        load(task)
        recorded.append(routes_and_losses(method, test_loader(cfg, bench, task), task))
    load(done - 1)
    tokens_per_image = vit.num_prefix_tokens + vit.patch_embed.grid_size[0] * vit.patch_embed.grid_size[1]
    buckets = position_buckets(vit.num_prefix_tokens, vit.patch_embed.grid_size[0])
    compositions, changes = [], []
    for task, (_, before, labels) in zip(old, recorded):
        _, after, _ = routes_and_losses(method, test_loader(cfg, bench, task), task)
        n = len(labels)
        compositions.append(torch.stack([torch.full((n * tokens_per_image,), task), labels.repeat_interleave(
            tokens_per_image), buckets.repeat(n)], dim=1))
        changes.append((after - before).repeat_interleave(tokens_per_image))
    compositions, changes = torch.cat(compositions), torch.cat(changes)
    layers, routes = {}, {"path_wise": [], "route_wise": []}
    for block in sorted(recorded[0][0]):
        selected = torch.cat([r[0][block] for r in recorded])
        layers[str(block)] = _layer_summary(selected, compositions, changes, bins, routes)
    pooled = {kind: mass_quantile_bins(_pooled(stats), bins) for kind, stats in routes.items()}
    report = {"old_tasks": old, "after_task": done - 1, "tokens": len(changes),
              "composition": ["task", "class", "position bucket (class token, 2x2 patch regions)"],
              "method": method.describe(), "layers": layers, "pooled_bins": pooled}
    zone = Zone(run.root, frozenset({"routes.json", "plots/routes.png"}))  # the only names `norga routes` writes
    write_output(run.root / "routes.json", (json.dumps(report, indent=1) + "\n").encode(), "--run", zone)
    _plot(report, run.root / "plots" / "routes.png", zone)
    return report


def _layer_summary(selected: torch.Tensor, compositions: torch.Tensor, changes: torch.Tensor, bins: int,
                   routes: Dict[str, list]) -> dict:
    """One layer's N_eff and bins; appends its per-route statistics to ``routes`` (for the pooled bins)."""
    path = route_statistics(route_rows(selected), compositions, changes)
    heads = [route_statistics(route_rows(selected, m), compositions, changes) for m in range(selected.shape[1])]
    routes["path_wise"].append(path)
    routes["route_wise"].append(_pooled(heads))
    return {"path_wise": {"n_eff": mass_weighted_n_eff(path), "routes": len(path["mass"]),
                          "bins": mass_quantile_bins(path, bins)},
            "route_wise": {"n_eff": sum(map(mass_weighted_n_eff, heads)) / len(heads),
                           "n_eff_per_head": [mass_weighted_n_eff(h) for h in heads],
                           "routes_per_head": [len(h["mass"]) for h in heads],
                           "bins": mass_quantile_bins(_pooled(heads), bins)}}


def _pooled(parts: List[dict]) -> dict:
    """Several route tables (heads, or layers) as one, each part's mass divided by their number (total mass 1)."""
    return {key: [v / len(parts) if key == "mass" else v for part in parts for v in part[key]]
            for key in ("mass", "n_eff", "delta_loss")}


def _bin_points(rows: List[dict]) -> tuple:
    """Pooled bins -> x (bin middles), x half-widths (half the bin's N_eff range), y (mean ΔL_old), y s.e. (0 when
    a bin has one route: NaN)."""
    x = [(r["n_eff_min"] + r["n_eff_max"]) / 2 for r in rows]
    half = [(r["n_eff_max"] - r["n_eff_min"]) / 2 for r in rows]
    se = [0.0 if r["delta_loss_se"] != r["delta_loss_se"] else r["delta_loss_se"] for r in rows]
    return x, half, [r["delta_loss"] for r in rows], se


def _plot(report: dict, path: Path, zone: Optional[Zone] = None) -> None:
    """Two panels: N_eff per adapted block (ticks at the adapted blocks, half a block of margin) and mean ΔL_old
    per pooled mass-quantile bin (horizontal bars span each bin's N_eff range); both axes fit the data."""
    layers = sorted(report["layers"], key=int)
    blocks = [int(b) for b in layers]
    fig = figure(10, 3.6)
    left, right = fig.subplots(1, 2)
    for kind, marker in (("route_wise", "o"), ("path_wise", "s")):
        left.plot(blocks, [report["layers"][b][kind]["n_eff"] for b in layers], marker=marker,
                  label=kind.replace("_", "-"))
        x, half, y, se = _bin_points(report["pooled_bins"][kind])
        right.errorbar(x, y, xerr=half, yerr=se, marker=marker, capsize=3, label=kind.replace("_", "-"))
    left.set_xticks(blocks)
    left.set_xlim(min(blocks) - 0.5, max(blocks) + 0.5)
    left.set(xlabel="adapted block", ylabel="mass-weighted N_eff", title="composition mixing per layer")
    left.legend()
    right.set(xlabel="N_eff (bar: its mass-quantile bin)", ylabel="mean ΔL_old ± s.e. over routes",
              title="mixing vs forgetting (routes of all layers)")
    right.legend()
    save_png(fig, path, "--run", zone)
