"""The MoE arms' benchmark tables (bench/moe_arms.py): per-arm routing means and paired differences, by hand."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))


def _moe_rows():
    """Two MoE arms over seeds 1-3 (and a fourth seed of lora_moe only); BWT / FM / FA as fractions."""
    rows = []
    for seed, (fa_l, fa_m, bwt_l, bwt_m, n_l, n_m) in enumerate(
            ((0.40, 0.50, -0.30, -0.20, 9.0, 3.0), (0.45, 0.50, -0.25, -0.17, 8.0, 4.0),
             (0.42, 0.47, -0.28, -0.19, 10.0, 2.0)), start=1):
        rows.append({"run": "lora_moe", "seed": seed, "FA": fa_l, "BWT": bwt_l, "FM": -bwt_l,
                     "n_eff_route": n_l, "n_eff_path": n_l})
        rows.append({"run": "mh_moe", "seed": seed, "FA": fa_m, "BWT": bwt_m, "FM": -bwt_m,
                     "n_eff_route": n_m, "n_eff_path": float("nan") if seed == 3 else 2 * n_m})
    rows.append({"run": "lora_moe", "seed": 4, "FA": 0.9, "BWT": 0.0, "FM": 0.0, "n_eff_route": 1.0,
                 "n_eff_path": 1.0})
    return rows


def _cells(line: str) -> list:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_moe_tables_by_hand():
    """Per-arm means and paired differences of the MoE arms, each number worked out by hand."""
    from bench.moe_arms import routing_lines, routing_pair_lines

    t2, t1 = 4.302653, 12.706205  # t_{0.975} with 2 and 1 degrees of freedom
    per_arm = {_cells(ln)[0]: _cells(ln) for ln in routing_lines(_moe_rows()) if ln.startswith("| ")}
    mh = per_arm["mh_moe"]
    assert mh[1] == "3" and mh[2].startswith("49.00 [") and mh[5].startswith("3.00 [")
    assert mh[6].startswith("7.00 [")  # path N_eff 6, 8 and a NaN, which is left out
    assert per_arm["lora_moe"][1] == "4"
    pair_lines = [ln for ln in routing_pair_lines(_moe_rows()) if ln.startswith("| mh_moe − ")]
    assert len(pair_lines) == 1  # lora_moe_k16_top5 has no rows
    cells = _cells(pair_lines[0])
    assert cells[:2] == ["mh_moe − lora_moe", "3"]  # seed 4 has no mh_moe row

    def interval(d, t):
        d = np.array(d)
        half = t * d.std(ddof=1) / math.sqrt(len(d))
        return f"{d.mean():+.2f} [{d.mean() - half:+.2f}, {d.mean() + half:+.2f}]"

    assert cells[2] == interval([10.0, 5.0, 5.0], t2)  # FA in points: [-0.50, +13.84] contains 0
    assert cells[3] == interval([10.0, 8.0, 9.0], t2) + " *resolved*"  # BWT in points
    assert cells[5] == interval([-6.0, -4.0, -8.0], t2) + " *resolved*"  # route-wise N_eff
    assert cells[6] == interval([-3.0, 0.0], t1)  # path-wise N_eff over seeds 1, 2: not resolved
    assert cells[7] == "–" and mh[7] == "–"  # rows without dL_hi_lo


def test_routing_fields_from_a_route_report(monkeypatch, tmp_path):
    """Layer means of N_eff and the high-minus-low ΔL_old of the pooled route-wise bins, by hand."""
    from bench import moe_arms
    from norga.engine import route_report

    def bins(*losses):
        return [{"mass": 1 / len(losses), "delta_loss": v} for v in losses]

    report = {"layers": {"0": {"route_wise": {"n_eff": 4.0}, "path_wise": {"n_eff": 10.0}},
                         "1": {"route_wise": {"n_eff": 2.0}, "path_wise": {"n_eff": 6.0}}},
              "pooled_bins": {"route_wise": bins(0.5, 0.9, 0.7, 1.25), "path_wise": bins(3.0, 0.0)}}
    monkeypatch.setattr(route_report, "route_report", lambda run_dir: report)
    fields = moe_arms.routing_fields(tmp_path)
    assert fields == pytest.approx({"n_eff_route": 3.0, "n_eff_path": 8.0, "dL_hi_lo": 0.75})
    report["pooled_bins"]["route_wise"] = bins(0.5)
    assert math.isnan(moe_arms.routing_fields(tmp_path)["dL_hi_lo"])  # one bin: no gap to report
