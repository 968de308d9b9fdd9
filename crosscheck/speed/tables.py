"""Summary and Markdown of the speed report (crosscheck/speed/report.py): seconds per stage, means over the
seeds, the speed-up (reference wall / norga wall) and both sides' final accuracy (FA, in %)."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import List

from crosscheck.speed.stage_timer import STAGES
from bench.regimes import REPO
from norga.reports.metrics import summarize

REPORT = REPO / "bench" / "results" / "speed_report.json"
LABELS = {"startup": "start-up (process start → first stage)", "tii": "TII (task-identity head, its alignment)",
          "wtp": "WTP (prompt + classifier)", "statistics": "statistics (feature passes for the Gaussians)",
          "tap": "TAP (classifier alignment)", "evaluation": "evaluation after each task",
          "diagnostics": "diagnostics (norga, off by default)", "other": "other (checkpoints, logs, exit)"}


def summarise(rows: List[dict], meta: dict) -> dict:
    """The report: every (side, seed) row with its FA, and per side the mean seconds of each stage and of the wall."""
    for r in rows:
        r["FA"] = summarize(r["acc_matrix"])["FA"]
    sides = {}
    for side in ("reference", "norga"):
        mine = [r for r in rows if r["side"] == side]
        if mine:
            sides[side] = {"seeds": [r["seed"] for r in mine], "wall": mean(r["wall"] for r in mine),
                           "cpu_total": mean(r.get("cpu_total", 0.0) for r in mine), "FA": mean(r["FA"] for r in mine),
                           "seconds": {s: mean(r["seconds"].get(s, 0.0) for r in mine) for s in STAGES},
                           "cpu": {s: mean(r.get("cpu", {}).get(s, 0.0) for r in mine) for s in STAGES}}
    out = {"meta": meta, "sides": sides, "rows": rows}
    if len(sides) == 2:
        out["speedup"] = sides["reference"]["wall"] / sides["norga"]["wall"]
        if sides["norga"]["cpu_total"] > 0:
            out["speedup_cpu"] = sides["reference"]["cpu_total"] / sides["norga"]["cpu_total"]
        out["FA_difference"] = sides["norga"]["FA"] - sides["reference"]["FA"]
    return out


def _cell(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def _pair(side, stage: str) -> str:
    if side is None:
        return "–"
    return f"{side['seconds'][stage]:.1f} ({side['cpu'][stage]:.1f})"


def _total(side) -> str:
    return "–" if side is None else f"{side['wall']:.1f} ({side['cpu_total']:.1f})"


def markdown(report: dict) -> List[str]:
    """The table of docs/crosscheck.md: one line per stage, mean seconds per side, then wall, speed-up and FA."""
    if not report["rows"]:
        return ["# Speed report", "", "*Not measured yet: `python -m crosscheck.speed.report --ref CHECKOUT "
                "--ref-pythonpath PATHS` writes this table (docs/crosscheck.md, \"Repeat it\").*"]
    sides, meta = report["sides"], report["meta"]
    ref, ours = sides.get("reference"), sides.get("norga")
    seeds = ", ".join(str(s) for s in meta["seeds"])
    lines = ["# Speed report", "",
             f"Mean over seeds {seeds}, {meta['threads']} threads per side, one side after the other "
             f"({meta['date']}; load average afterwards {meta.get('load_after')}). Seconds of wall time and, in "
             "brackets, of the processes' CPU time (user + system; the measure of work when the machine is shared).",
             "", "| stage | reference (authors' code) | norga |", "|---|---|---|"]
    for stage in STAGES:
        lines.append(f"| {LABELS[stage]} | {_pair(ref, stage)} | {_pair(ours, stage)} |")
    lines.append(f"| **total** | **{_total(ref)}** | **{_total(ours)}** |")
    lines.append(f"| FA (%) | {_cell(ref and 100 * ref['FA'])} | {_cell(ours and 100 * ours['FA'])} |")
    if "speedup" in report:
        cpu = f", of CPU time **{report['speedup_cpu']:.2f}×**" if "speedup_cpu" in report else ""
        lines += ["", f"Speed-up (reference / norga) of wall time: **{report['speedup']:.2f}×**{cpu}; FA norga − "
                      f"reference: {100 * report['FA_difference']:+.2f} points.", ""]
    lines += ["| side | seed | wall (s) | FA (%) |", "|---|---|---|---|"]
    lines += [f"| {r['side']} | {r['seed']} | {r['wall']:.1f} | {100 * r['FA']:.2f} |" for r in report["rows"]]
    return lines


def write_report(report: dict, path: Path) -> None:
    """``path`` (JSON) and its .md twin."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    path.with_suffix(".md").write_text("\n".join(markdown(report)) + "\n")
