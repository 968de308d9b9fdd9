"""The head-wise routing arms of the evidence benchmark (issue #21), fixed before any of them ran; their
configs are ``configs/bench/evidence/<arm>.yaml`` (this module reports them: route statistics and tables).

Backbone of the regime: DINOv2 ViT-S/14 (width D = 384, 6 attention heads of 64, 12 blocks) at 56 px
(17 tokens). Every arm trains 20 epochs at batch 25 (the prompted arms' WTP budget), adapters on all 12
blocks, AdamW lr 1e-3 with cosine, the ``aligned`` classifier protocol for every MoE arm.

* ``lora_moe``: K = 4, top-1, rank 7 — the paper's LoRAMoE baseline (4 experts, top-1), its rank chosen so
  that it activates the parameters per token of ``mh_moe`` (k r 2D = 7 x 768 = 5376 = H k r (D/H + D)).
* ``mh_moe``: H = 6 slices (the backbone's 6 attention heads: each slice is one head's 64 dimensions of
  the post-attention state), K = 4, top-1, rank 2.
* ``lora_moe_k16_top5``: the paper's controlled comparison at our width — C(16, 5) = 4368 routing
  outcomes per layer against mh_moe's 4^6 = 4096, rank 2: 24.6 k expert parameters per layer against
  21.5 k (routers 6.1 k vs 1.5 k); what differs is routing on the head-mixed state vs per head slice.
* ``mh_moe_h2`` / ``_h4`` / ``_h8``: the H sweep (K = 4, top-1, rank 2; the activated parameters grow
  with H: 2304, 3840, 6912 per token and layer — reported, not matched); with ``mh_moe`` (H = 6) the sweep
  covers H = 2, 4, 6, 8, and ``mh_moe_h8 − mh_moe_h2`` is paired over seeds as the readout of the paper's
  Table 4 (performance grows with the number of heads); that pair was added before any sweep run started.
* ``norga_headwise``: the HiDe-Prompt pipeline with the head-wise NoRGa gate (α, τ per attention head,
  tanh), against ``norga_tanh`` and ``hideprompt`` of the main arms.

Rows of the MoE arms carry BWT and the route statistics of ``norga routes`` (mass-weighted N_eff over old
tasks' test tokens, averaged over the 12 layers, route-wise and path-wise). ``dL_hi_lo`` (the ΔL_old gap
between the highest- and lowest-N_eff bins of the pooled routes) was added to the rows after the first
``lora_moe`` run, as a one-number readout of the paper's Fig. 5 claim; it is read from the same routes.json
of every run and plays no part in any pass/fail decision.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from bench.regimes import REGIMES
from norga.config import read_config_file
from norga.reports.summary_stats import describe, difference_text, paired, table_head

EVIDENCE = REGIMES["evidence"]
MOE_METHODS = ("lora_moe", "mh_moe")


def is_moe_arm(arm: str) -> bool:
    """Whether ``arm`` of the evidence regime runs MoE adapters (its config, configs/bench/evidence/<arm>.yaml)."""
    if arm not in EVIDENCE.all_arms():
        return False
    return read_config_file(EVIDENCE.arm_config(arm)).get("method", {}).get("name") in MOE_METHODS


ROUTING_ARMS = [a for a in EVIDENCE.all_arms() if is_moe_arm(a)]  # in the regime's order
ROUTING_PAIRS = [p for p in EVIDENCE.pairs if is_moe_arm(p[0]) and is_moe_arm(p[1])]
MOE_COLUMNS = ("FA", "BWT", "FM", "n_eff_route", "n_eff_path", "dL_hi_lo")


def routing_fields(run_dir: Path) -> Dict[str, float]:
    """Route statistics of a finished MoE run (writes its routes.json and plots/routes.png).

    n_eff_route / n_eff_path: mass-weighted N_eff averaged over the adapted layers. dL_hi_lo: over the routes of
    all layers pooled (route-wise), the mean ΔL_old (nats per image) of the highest-N_eff mass-quantile bin minus
    that of the lowest — positive when routes that mix more compositions forget more (the paper's Fig. 5)."""
    from norga.engine.route_report import route_report

    report = route_report(run_dir)
    layers = report["layers"].values()
    bins = report["pooled_bins"]["route_wise"]
    return {"n_eff_route": sum(v["route_wise"]["n_eff"] for v in layers) / len(layers),
            "n_eff_path": sum(v["path_wise"]["n_eff"] for v in layers) / len(layers),
            "dL_hi_lo": bins[-1]["delta_loss"] - bins[0]["delta_loss"] if len(bins) > 1 else math.nan}


def _values_by_seed(rows: List[dict], arm: str, key: str) -> Dict[int, float]:
    """{seed: value} of one arm; FA, BWT, FM in %, N_eff as is; missing or NaN values are left out."""
    scale = 100 if key in ("FA", "BWT", "FM") else 1
    return {r["seed"]: scale * r[key] for r in rows
            if r["run"] == arm and r.get(key) is not None and not math.isnan(r[key])}


def routing_lines(rows: List[dict], arms: Optional[Sequence[str]] = None) -> List[str]:
    """Per MoE arm (``arms``, default all of ROUTING_ARMS): FA (%), BWT and FM (points) and N_eff, mean [95% t
    interval] over seeds; arms without rows are left out."""
    lines = []
    for arm in (a for a in (arms or ROUTING_ARMS) if is_moe_arm(a)):
        mine = [r for r in rows if r["run"] == arm]
        if not mine:
            continue
        cells = []
        for key in MOE_COLUMNS:
            values = list(_values_by_seed(rows, arm, key).values())
            e = describe(values) if values else None
            cells.append("–" if e is None else f"{e.mean:.2f}" + ("" if e.n < 2 else f" [{e.low:.2f}, {e.high:.2f}]"))
        lines.append(f"| {arm} | {len(mine)} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["MoE arms: FA (%), BWT and FM (points), the mass-weighted N_eff over old tasks' tokens (mean over 12 "
            "layers) and dL_hi_lo (ΔL_old of the highest- minus the lowest-N_eff bin of the pooled routes, nats), "
            "mean [95% t interval] over seeds:", "", *table_head("arm", MOE_COLUMNS), *lines]


def routing_pair_lines(rows: List[dict], pairs: Optional[Sequence[Tuple[str, str]]] = None) -> List[str]:
    """Paired differences a − b over the seeds both MoE arms have, for every pair of two MoE arms in ``pairs``
    (default ROUTING_PAIRS): FA, BWT, FM in points, N_eff as is; mean [95% t interval], *resolved* when the
    interval excludes 0; pairs without a common seed are left out."""
    lines = []
    for a, b in ((a, b) for a, b in (pairs or ROUTING_PAIRS) if is_moe_arm(a) and is_moe_arm(b)):
        cells, seeds = [], []
        for key in MOE_COLUMNS:
            va, vb = _values_by_seed(rows, a, key), _values_by_seed(rows, b, key)
            if not set(va) & set(vb):
                cells.append("–")
                continue
            common, e = paired(va, vb)
            seeds = max(seeds, common, key=len)
            cells.append(difference_text(e))
        if seeds:
            lines.append(f"| {a} − {b} | {len(seeds)} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["Paired differences between MoE arms (FA, BWT, FM in points; N_eff as is; mean [95% t interval]):", "",
            *table_head("difference", MOE_COLUMNS), *lines]
