"""The GPU check's summary: ``OUT/gpu_check.json`` (everything, partial results of stopped steps included),
``OUT/gpu_check.md`` (the tables docs/gpus.md explains) and, on CUDA once the eager bf16 passes are timed,
``OUT/gpu_rates.json`` (the rates ``norga reproduce --quick-gpu`` states its minutes from)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

from .gpu_check_steps import BUDGETS, OPTIONAL_STEPS, REPORT_S, START_S
from .gpu_check_timing import FULL, TINY, measured_rates, ratios

RATES_FILE = "gpu_rates.json"


def counts_against(name: str, record: dict) -> bool:
    """Whether ``record`` keeps the check from passing: not ``ok`` (a skip for a missing optional package or a
    compiler, and an optional step's timeout or skip, excepted), or ``passed: False``."""
    status = record["status"]
    if status == "ok":
        return (record.get("result") or {}).get("passed") is False
    if status == "skipped" and record.get("missing"):
        return False
    return not (name in OPTIONAL_STEPS and status in ("timeout", "skipped", "pending"))


def verdict(records: Dict[str, dict]) -> bool:
    """True when no step counts against the check (a step reporting ``passed: None`` only informs; a step not run
    yet counts against it, so a provisional summary passes only once every required step has)."""
    return not any(counts_against(name, r) for name, r in records.items())


def timing_of(record: dict) -> Dict[str, dict]:
    """The timed passes of the timing step: its result, or the measurements emitted before it was stopped."""
    result = record.get("result") or {}
    return result.get("passes") or record.get("partials") or {}


def all_passes(steps: Dict[str, dict]) -> Dict[str, dict]:
    """The eager (timing step) and compiled (compile step) passes together."""
    return {**timing_of(steps.get("timing", {})), **timing_of(steps.get("compile", {}))}


def budget_table(tiny: bool = False) -> str:
    """docs/gpus.md's cold-start budget table: the process start, every step's limit, the summaries, the sum."""
    column = 1 if tiny else 0
    rows = [("process start (interpreter, imports, the prepared folder's checksums)", START_S)]
    rows += [(f"`{name}`" + (" (optional)" if name in OPTIONAL_STEPS else ""), BUDGETS[name][column])
             for name in BUDGETS]
    rows += [("summaries after every step, the final one, scratch clean-up", REPORT_S)]
    lines = ["| part | limit (s) |", "|---|---|"] + [f"| {name} | {int(s)} |" for name, s in rows]
    return "\n".join(lines + [f"| **total** | **{int(sum(s for _, s in rows))}** |"])


def write_summary(out: Path, meta: dict, records: Dict[str, dict]) -> List[Path]:
    """Write the JSON, the markdown and (when measured on CUDA) the rates file; returns their paths."""
    summary = {"meta": meta, "passed": verdict(records), "steps": records}
    paths = [out / "gpu_check.json", out / "gpu_check.md"]
    write_atomic(paths[0], json.dumps(summary, indent=1, default=str))
    write_atomic(paths[1], markdown(summary))
    timing = timing_of(records.get("timing", {}))
    device = (records.get("environment", {}).get("result") or {}).get("gpu")
    rates = measured_rates(timing, TINY if meta["tiny"] else FULL, device or meta["device"])
    if rates and meta["device"].startswith("cuda") and not meta["tiny"]:
        rates.update(source="python -m bench.gpu_check", date=meta["started"], torch=meta.get("torch"))
        paths.append(out / RATES_FILE)
        write_atomic(paths[2], json.dumps(rates, indent=1))
    return paths


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a kill mid-write leaves the old file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def status_line(name: str, record: dict) -> str:
    result = record.get("result") or {}
    passed = {True: "passed", False: "**FAILED**", None: "reported"}[result.get("passed")] \
        if record["status"] == "ok" else f"**{record['status']}**"
    reason = record.get("reason") or record.get("error") or ""
    if record["status"] == "skipped" and record.get("missing"):
        passed = "skipped (missing)"
    elif name in OPTIONAL_STEPS and record["status"] in ("timeout", "skipped", "pending"):
        passed = f"{record['status']} (optional: not measured)"
    seconds = f"{record.get('seconds', '–')} / {record.get('wall_s', '–')}"
    return f"| {name} | {passed} | {seconds} | {record.get('budget_s', '–')} | {reason} |"


def markdown(summary: dict) -> str:
    meta, steps = summary["meta"], summary["steps"]
    env = (steps.get("environment") or {}).get("result") or {}
    lines = [f"# GPU check ({'tiny, ' if meta['tiny'] else ''}{env.get('gpu', meta['device'])})", "",
             f"Started {meta['started']}, {meta['wall_s']} s wall of {meta['total_budget_s']} s; torch "
             f"{env.get('torch', '?')}, timm {env.get('timm', '?')}, norga {env.get('norga', '?')}. "
             f"Overall: {'passed' if summary['passed'] else 'NOT passed'}.", *provisional_lines(summary), "",
             "| step | outcome | seconds (step / with its worker's start) | budget s | reason |",
             "|---|---|---|---|---|"]
    lines += [status_line(name, record) for name, record in steps.items()]
    for names, render in SECTIONS.items():
        if any(name in steps for name in names):
            lines += ["", *render(steps)]
    return "\n".join(lines) + "\n"


def provisional_lines(summary: dict) -> List[str]:
    """The note of a summary written between steps, and of an output folder over its size limit."""
    meta, lines = summary["meta"], []
    if meta.get("provisional"):
        waiting = [n for n, r in summary["steps"].items() if r["status"] in ("pending", "starting", "running")]
        lines += ["", f"**Provisional** (written between steps; not run yet: {', '.join(waiting) or 'none'})."]
    if meta.get("out_mib", 0) > meta.get("out_limit_mib", float("inf")):
        lines += ["", f"The output folder holds {meta['out_mib']} MiB, over its {meta['out_limit_mib']} MiB."]
    return lines


def attention_lines(steps: Dict[str, dict]) -> List[str]:
    restricted = (steps.get("attention") or {}).get("result") or {}
    profiled = (steps.get("attention_profile") or {}).get("result") or {}
    r = restricted or profiled
    if not r:
        return ["## Attention", "", "no result"]
    lines = ["## Attention (SDPA)", "", f"Head dim {r['head_dim']} + prefix {r['prefix_length']} -> "
             f"{r['augmented_head_dim']} given to SDPA on {r['device']}.", "",
             "| dtype | prefix call, fused only | model, fused only | backends the profiler saw |", "|---|---|---|---|"]
    for amp in ("off", "bf16"):
        d = {**restricted.get("dtypes", {}).get(amp, {}), **profiled.get("dtypes", {}).get(amp, {})}
        status = lambda key: d.get(key, {}).get("status", "–")  # noqa: E731
        seen = d.get("prefix_profiled", {}).get("backends")
        lines.append(f"| {'fp32' if amp == 'off' else amp} | {status('prefix_restricted')} | "
                     f"{status('model_restricted')} | {'–' if seen is None else ', '.join(seen) or 'none'} |")
    return lines + (["", r["note"]] if r.get("note") else [])


def smoke_lines(steps: Dict[str, dict]) -> List[str]:
    record = steps.get("smoke") or {}
    runs = (record.get("result") or {}).get("runs") or record.get("partials") or {}
    lines = ["## Smoke configs", "", "Against the CPU: `arithmetic` methods are judged within one (bf16: two) of "
             "the 36 test images; `sampling` and `device_draws` methods draw another random sample on CUDA and are "
             "reported only (bench/gpu_check_expect.py).", "",
             "| method | amp | FA | CPU FA (fp32) | expected | diff (band), points | seconds | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for key, r in runs.items():
        method, amp = key.split("/")
        if "error" in r or "skipped" in r:
            what = f"error: {r['error']}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"| {method} | {'fp32' if amp == 'off' else amp} | {what} | | | | | |")
            continue
        cpu = "–" if r.get("cpu_FA") is None else f"{r['cpu_FA']:.3f}"
        lines.append(f"| {method} | {'fp32' if amp == 'off' else amp} | {r['FA']:.3f} | {cpu} | "
                     f"{(r.get('expect') or {}).get('kind', '–')} | {_band(r.get('expect') or {})} | {r['seconds']} | "
                     f"{mib(r.get('peak_mib'))} |")
    return lines


def _band(expect: dict) -> str:
    """``+2.78 (≤ 2.78) ok`` / ``... OUTSIDE`` for a judged run, the difference alone for a reported one."""
    diff = expect.get("diff_points")
    if diff is None:
        return "–"
    if expect.get("within") is None:
        return f"{diff:+.2f} (not judged)"
    return f"{diff:+.2f} (≤ {expect['band_points']:.2f}) {'ok' if expect['within'] else 'OUTSIDE'}"


def small_task_lines(steps: Dict[str, dict]) -> List[str]:
    record = steps.get("small_task") or {}
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


def timing_lines(steps: Dict[str, dict]) -> List[str]:
    passes = all_passes(steps)
    if not passes:
        return ["## Timing", "", "no measurement"]
    result = (steps.get("compile") or {}).get("result") or (steps.get("timing") or {}).get("result") or {}
    compile_record = steps.get("compile") or {"status": "not asked"}
    lines = ["## Timing (bf16 autocast)", "", f"compile backend: {result.get('compile_backend', '?')}; compile step: "
             f"{compile_record['status']}" + (f" ({compile_record['reason']})" if compile_record.get("reason") else ""),
             "", "| mode | pass | img/s | median s | first call s | peak MiB |", "|---|---|---|---|---|---|"]
    for key, v in passes.items():
        mode, name = key.split("/")
        lines.append(f"| {mode} | {name} | {v['img_s']} | {v['median_s']} | {v['first_s']} | {mib(v['peak_mib'])} |")
    lines += ["", "Prompted / plain timm seconds: " + (", ".join(f"{k} {v}" for k, v in ratios(passes).items())
                                                       or "not measured")]
    return lines


def mib(value) -> str:
    return "n/a (CPU)" if value is None else str(value)


SECTIONS = {("attention", "attention_profile"): attention_lines, ("smoke",): smoke_lines,
            ("small_task",): small_task_lines, ("timing", "compile"): timing_lines}
