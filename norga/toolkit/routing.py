"""Route statistics of MoE adapters: the effective composition number N_eff and old-task loss change per route.

MH-MoE paper, section 2.3. A token's *route* at an adapted layer is its routing
decision: the selected expert set (LoRAMoE; top-1: one expert), or for the head-wise
layer either one head's selected set (*route-wise*, per head m) or the tuple over all
heads (*path-wise*). A token's *composition* is the tuple of its factor values; in
images: class label, task label and a token-position bucket (:func:`position_buckets`).
Over old-task tokens,

    p(c | r) = share of the tokens routed to r that have composition c      (eq. 8)
    N_eff(r) = 1 / sum_c p(c | r)^2                                         (eq. 9)

1 when one composition uses the route, c when c compositions share it equally. The
layer summary is the mass-weighted mean sum_r mass(r) N_eff(r), mass(r) = share of the
old-task tokens routed to r (the paper's Fig. 4). ΔL_old(r) (eq. 10-11) is the mean,
over the tokens routed to r when the task was learned, of their image's loss change
after the later tasks (a token carries its image's loss: classification has one loss per
image). Routes are binned by mass quantiles of N_eff (Fig. 5) by :func:`mass_quantile_bins`.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor


def row_ids(rows: Tensor) -> Tensor:
    """(N, F) integer rows -> (N,) ids, equal rows -> equal ids (0..distinct-1)."""
    if rows.dim() == 1:
        rows = rows[:, None]
    return torch.unique(rows, dim=0, return_inverse=True)[1]


def route_rows(selected: Tensor, head: Optional[int] = None) -> Tensor:
    """Selected experts (N, H, k) -> route rows: the sorted set of ``head`` (N, k), or the path (N, H*k) if None."""
    ordered = selected.sort(dim=-1).values
    return ordered[:, head] if head is not None else ordered.reshape(len(ordered), -1)


def composition_table(routes: Tensor, compositions: Tensor) -> Tensor:
    """Token counts (R, C) of route ids (N,) x composition ids (N,), R / C = the numbers of distinct ids."""
    routes, compositions = row_ids(routes), row_ids(compositions)
    num_routes, num_comps = int(routes.max()) + 1, int(compositions.max()) + 1
    flat = torch.bincount(routes * num_comps + compositions, minlength=num_routes * num_comps)
    return flat.reshape(num_routes, num_comps).double()


def effective_compositions(counts: Tensor) -> Tensor:
    """N_eff per route (R,) from token counts (R, C): 1 / sum_c p(c|r)^2 (eq. 9)."""
    p = counts / counts.sum(1, keepdim=True)
    return 1.0 / (p ** 2).sum(1)


def route_statistics(routes: Tensor, compositions: Tensor, loss_change: Optional[Tensor] = None) -> Dict[str, list]:
    """Per route: mass, N_eff and (given each token's loss change (N,)) mean ΔL_old; tokens (N,) in, lists out.

    ``routes`` (N,) or (N, F) route rows; ``compositions`` (N,) or (N, F) factor rows.
    """
    ids = row_ids(routes)
    counts = composition_table(ids, compositions)
    tokens = counts.sum(1)
    stats = {"mass": (tokens / tokens.sum()).tolist(), "n_eff": effective_compositions(counts).tolist(),
             "tokens": tokens.long().tolist()}
    if loss_change is not None:
        sums = torch.zeros(len(tokens), dtype=torch.float64).index_add_(0, ids, loss_change.double())
        stats["delta_loss"] = (sums / tokens).tolist()
    return stats


def mass_weighted_n_eff(stats: Dict[str, list]) -> float:
    """sum_r mass(r) N_eff(r): the mean N_eff an old-task token sees on its route (Fig. 4)."""
    return float(sum(m * n for m, n in zip(stats["mass"], stats["n_eff"])))


def mass_quantile_bins(stats: Dict[str, list], bins: int = 4) -> List[Dict[str, float]]:
    """Routes sorted by N_eff and cut into ``bins`` groups of about equal total mass (Fig. 5): per bin the
    mass, the N_eff range and the mean ΔL_old over its routes with its standard error."""
    order = sorted(range(len(stats["n_eff"])), key=lambda r: stats["n_eff"][r])
    groups: List[List[int]] = [[] for _ in range(bins)]
    cumulative = 0.0
    for r in order:  # a route goes to the bin holding the middle of its mass interval
        groups[min(int((cumulative + stats["mass"][r] / 2) * bins), bins - 1)].append(r)
        cumulative += stats["mass"][r]
    rows = []
    for group in (g for g in groups if g):
        deltas = torch.tensor([stats["delta_loss"][r] for r in group], dtype=torch.float64)
        error = float(deltas.std(unbiased=True) / len(deltas) ** 0.5) if len(deltas) > 1 else float("nan")
        rows.append({"mass": sum(stats["mass"][r] for r in group), "routes": len(group),
                     "n_eff_min": stats["n_eff"][group[0]], "n_eff_max": stats["n_eff"][group[-1]],
                     "delta_loss": float(deltas.mean()), "delta_loss_se": error})
    return rows


def position_buckets(num_prefix: int, grid: int, per_side: int = 2) -> Tensor:
    """Token position bucket (num_prefix + grid^2,): 0 for class/register tokens, then 1.. for the patches'
    ``per_side`` x ``per_side`` spatial regions (row-major)."""
    rows = torch.arange(grid)[:, None].expand(grid, grid) * per_side // grid
    cols = torch.arange(grid)[None, :].expand(grid, grid) * per_side // grid
    return torch.cat([torch.zeros(num_prefix, dtype=torch.long), 1 + (rows * per_side + cols).flatten()])
