"""The GPU check's summary: ``OUT/gpu_check.json`` (everything, partial results of stopped steps included),
``OUT/gpu_check.md`` (the tables docs/gpus.md explains) and, on CUDA once the eager bf16 passes are timed,
``OUT/gpu_rates.json`` (the rates ``norga reproduce --quick-gpu`` states its minutes from)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from .gpu_check_timing import FULL, TINY, measured_rates, ratios

RATES_FILE = "gpu_rates.json"


def verdict(records: Dict[str, dict]) -> bool:
    """True when every step ended ``ok`` and none reports ``passed: False`` (a step reporting None only informs)."""
    return all(r["status"] == "ok" and (r.get("result") or {}).get("passed") is not False for r in records.values())


def timing_of(record: dict) -> Dict[str, dict]:
    """The timed passes of the timing step: its result, or the measurements emitted before it was stopped."""
    result = record.get("result") or {}
    return result.get("passes") or record.get("partials") or {}


def write_summary(out: Path, meta: dict, records: Dict[str, dict]) -> List[Path]:
    """Write the JSON, the markdown and (when measured on CUDA) the rates file; returns their paths."""
    summary = {"meta": meta, "passed": verdict(records), "steps": records}
    paths = [out / "gpu_check.json", out / "gpu_check.md"]
    paths[0].write_text(json.dumps(summary, indent=1, default=str))
    paths[1].write_text(markdown(summary))
    timing = timing_of(records.get("timing", {}))
    device = records.get("environment", {}).get("result", {}).get("gpu")
    rates = measured_rates(timing, TINY if meta["tiny"] else FULL, device or meta["device"])
    if rates and meta["device"].startswith("cuda") and not meta["tiny"]:
        rates.update(source="python -m bench.gpu_check", date=meta["started"], torch=meta.get("torch"))
        paths.append(out / RATES_FILE)
        paths[2].write_text(json.dumps(rates, indent=1))
    return paths


def status_line(name: str, record: dict) -> str:
    result = record.get("result") or {}
    passed = {True: "passed", False: "**FAILED**", None: "reported"}[result.get("passed")] \
        if record["status"] == "ok" else f"**{record['status']}**"
    reason = record.get("reason") or record.get("error") or ""
    return f"| {name} | {passed} | {record.get('seconds', '–')} | {record.get('budget_s', '–')} | {reason} |"


def markdown(summary: dict) -> str:
    meta, steps = summary["meta"], summary["steps"]
    env = (steps.get("environment") or {}).get("result") or {}
    lines = [f"# GPU check ({'tiny, ' if meta['tiny'] else ''}{env.get('gpu', meta['device'])})", "",
             f"Started {meta['started']}, {meta['wall_s']} s wall of {meta['total_budget_s']} s; torch "
             f"{env.get('torch', '?')}, timm {env.get('timm', '?')}, norga {env.get('norga', '?')}. "
             f"Overall: {'passed' if summary['passed'] else 'NOT passed'}.", "",
             "| step | outcome | seconds | budget s | reason |", "|---|---|---|---|---|"]
    lines += [status_line(name, record) for name, record in steps.items()]
    for name, render in SECTIONS.items():
        if name in steps:
            lines += ["", *render(steps[name])]
    return "\n".join(lines) + "\n"


def attention_lines(record: dict) -> List[str]:
    r = record.get("result")
    if not r:
        return ["## Attention", "", "no result"]
    lines = ["## Attention (SDPA)", "", f"Head dim {r['head_dim']} + prefix {r['prefix_length']} -> "
             f"{r['augmented_head_dim']} given to SDPA on {r['device']}.", "",
             "| dtype | prefix call, fused only | model, fused only | backends the profiler saw |", "|---|---|---|---|"]
    for amp, d in r["dtypes"].items():
        lines.append(f"| {'fp32' if amp == 'off' else amp} | {d['prefix_restricted']['status']} | "
                     f"{d['model_restricted']['status']} | {', '.join(d['prefix_profiled']['backends']) or 'none'} |")
    return lines + (["", r["note"]] if r.get("note") else [])


def smoke_lines(record: dict) -> List[str]:
    runs = (record.get("result") or {}).get("runs") or record.get("partials") or {}
    lines = ["## Smoke configs", "", "| method | amp | FA | CPU FA (fp32) | seconds | peak MiB |",
             "|---|---|---|---|---|---|"]
    for key, r in runs.items():
        method, amp = key.split("/")
        if "error" in r:
            lines.append(f"| {method} | {amp} | error: {r['error']} | | | |")
            continue
        cpu = "–" if r.get("cpu_FA") is None else f"{r['cpu_FA']:.3f}"
        lines.append(f"| {method} | {'fp32' if amp == 'off' else amp} | {r['FA']:.3f} | {cpu} | {r['seconds']} | "
                     f"{mib(r.get('peak_mib'))} |")
    return lines


def small_task_lines(record: dict) -> List[str]:
    r = (record.get("result") or {}) or record.get("partials") or {}
    lines = ["## NoRGa on the small CIFAR-100 task", "",
             "| amp | FA | CPU FA | FA diff (points) | max entry diff (points) | tolerance (FA / entry) | within | s "
             "| peak MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for amp in ("off", "bf16"):
        c = r.get(amp)
        if not c:
            continue
        if "skipped" in c:
            lines.append(f"| {amp} | skipped: {c['skipped']} | | | | | | | |")
            continue
        tol = c["tolerance"]
        lines.append(f"| {'fp32' if amp == 'off' else amp} | {c['FA'] * 100:.2f} | {c['cpu_FA'] * 100:.2f} | "
                     f"{c['FA_diff_points']:+.2f} | {c['max_entry_diff_points']:.2f} | {tol['FA']} / {tol['entry']} | "
                     f"{'yes' if c['within'] else '**no**'} | {c['seconds']} | {mib(c.get('peak_mib'))} |")
    return lines


def timing_lines(record: dict) -> List[str]:
    passes = timing_of(record)
    if not passes:
        return ["## Timing", "", "no measurement"]
    result = record.get("result") or {}
    lines = ["## Timing (bf16 autocast)", "", f"compile backend: {result.get('compile_backend', '?')}", "",
             "| mode | pass | img/s | median s | first call s | peak MiB |", "|---|---|---|---|---|---|"]
    for key, v in passes.items():
        mode, name = key.split("/")
        lines.append(f"| {mode} | {name} | {v['img_s']} | {v['median_s']} | {v['first_s']} | {mib(v['peak_mib'])} |")
    lines += ["", "Prompted / plain timm seconds: " + (", ".join(f"{k} {v}" for k, v in ratios(passes).items())
                                                       or "not measured")]
    return lines


def mib(value) -> str:
    return "n/a (CPU)" if value is None else str(value)


SECTIONS = {"attention": attention_lines, "smoke": smoke_lines, "small_task": small_task_lines,
            "timing": timing_lines}
