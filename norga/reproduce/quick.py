"""What the quick GPU check records besides accuracy: per-stage seconds and images/s of each run (from its
``epochs.jsonl``), the measured images/s and peak memory of the three backbone passes, and the run's peak memory.

Per-stage images/s are steps × the stage's configured batch size / seconds (an upper bound: a last batch may be
smaller); a stage's seconds are the time between consecutive epoch-log lines given to the later line's stage (as
``bench/throughput.py --task``), so the feature extraction before a stage counts towards it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional


def stage_timings(folder: Path, cfg) -> Dict[str, dict]:
    """``{stage: {"seconds": s, "steps": n, "img_s": images/s or None}}`` over all tasks of the run in ``folder``."""
    path = Path(folder) / "epochs.jsonl"
    if not path.is_file():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out: Dict[str, dict] = {}
    previous = None
    for line in lines:
        entry = out.setdefault(line["stage"], {"seconds": 0.0, "steps": 0})
        if previous is not None and line["time"] >= previous:
            entry["seconds"] += line["time"] - previous
        entry["steps"] += int(line.get("steps") or 0)
        previous = line["time"]
    for stage, entry in out.items():
        batch = getattr(getattr(cfg.method, stage, None), "batch_size", None)
        entry["img_s"] = (entry["steps"] * batch / entry["seconds"]) if batch and entry["seconds"] > 0 else None
        entry["seconds"] = round(entry["seconds"], 2)
    return out


def peak_memory_mib(reset: bool = True):
    """``torch.cuda.max_memory_allocated`` in MiB since the last reset (then reset), or "n/a (CPU)"."""
    import torch

    if not torch.cuda.is_available():
        return "n/a (CPU)"
    peak = torch.cuda.max_memory_allocated() / 2 ** 20
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return round(peak)


def timing_lines(records: dict) -> str:
    """Markdown section of the quick check's measurements (``{"runs": {run: {...}}, "passes_img_s": {...}}``)."""
    lines = ["", "## Throughput and memory per stage (measured on this device)", "",
             "| run | stage | seconds | optimizer steps | img/s | run peak MiB |", "|---|---|---|---|---|---|"]
    for run, record in records["runs"].items():
        for stage, t in record["stages"].items():
            img_s = f"{t['img_s']:.0f}" if t["img_s"] else "–"
            lines.append(f"| {run} | {stage} | {t['seconds']} | {t['steps']} | {img_s} | {record['peak_mib']} |")
    p = records.get("passes_img_s")
    if p:
        peak = f"{p['peak_mib']:.0f} MiB" if p["peak_mib"] is not None else "n/a (CPU)"
        lines += ["", f"Backbone passes at batch {p['batch']} on {p['device']} (amp {p['amp']}): training step "
                  f"{p['train']:.0f} img/s, frozen forward {p['frozen']:.0f} img/s, prompted forward "
                  f"{p['eval']:.0f} img/s; peak memory {peak}."]
    return "\n".join(lines) + "\n"


# ---- the quick check's expected minutes on one H100/H200 -------------------------------------------------------
MEASURED_RATES = "reproduce/gpu_rates.json"  # below the shipped configs' folder (configs/ in a checkout)
# images/s of ViT-B/16 at 224 px in bf16 assumed for an H100 (docs/reproduce.md, "What it costs"): no GPU check
# has measured them yet; `python -m bench.gpu_check` writes gpu_rates.json, copied to configs/reproduce/
ASSUMED_RATES = {"train": 1500.0, "frozen": 5000.0, "eval": 4000.0, "batch": 64}


def gpu_rates(path: Optional[Path] = None):
    """(``Rates``, label): the measured rates of ``path`` (default: configs/reproduce/gpu_rates.json) when it
    exists, else the assumed ones (an estimate)."""
    from ..config.shipped import shipped_root
    from .estimate import Rates

    path = path or shipped_root() / MEASURED_RATES
    if path.is_file():
        r = json.loads(path.read_text())
        try:
            rates = Rates(r["device"], r["amp"], float(r["train"]), float(r["frozen"]), float(r["eval"]),
                          r.get("peak_mib"), int(r["batch"]))
        except (KeyError, TypeError, ValueError) as err:
            from ..errors import NorgaError

            raise NorgaError(f"{path}: not a rates file of python -m bench.gpu_check ({err!r}); delete it or copy "
                             "the gpu_rates.json the GPU check wrote") from None
        return rates, (f"from rates measured by python -m bench.gpu_check on {r['device']} ({r.get('date', '?')}; "
                       f"{path.name})")
    a = ASSUMED_RATES
    rates = Rates("H100 (assumed)", "bf16", a["train"], a["frozen"], a["eval"], None, a["batch"])
    return rates, (f"an estimate at assumed rates of {a['train']:.0f} / {a['frozen']:.0f} / {a['eval']:.0f} img/s "
                   "(training step / frozen / prompted forward, ViT-B/16 bf16): no GPU check has measured them yet")


def expected_line(runs, configs, manifest, path: Optional[Path] = None) -> str:
    """One line: the runs' expected minutes on one H100/H200 and where the rates come from."""
    from .estimate import estimate, human_seconds, workload

    rates, label = gpu_rates(path)
    seconds = [estimate(workload(cfg, manifest.benchmarks.get(run.cell.benchmark)), rates)["seconds"]
               for run, cfg in zip(runs, configs)]
    total = None if any(s is None for s in seconds) else sum(seconds)
    return (f"expected on one H100/H200: {human_seconds(total)} of backbone passes for {len(configs)} runs, plus data "
            f"loading and the Gaussian stages ({label})")
