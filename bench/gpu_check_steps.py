"""The GPU check's steps, registered by name in run order; each takes a :class:`Context` and ``emit`` (a partial
result, kept even when the step is stopped) and returns its result dict. ``passed``: True / False, or None where
the step only reports (the CPU's attention backends). A step that needs an optional package or a compiler the
machine lacks raises :class:`~bench.gpu_check_env.StepSkipped` (recorded ``skipped`` with the reason, not failed).
"""
from __future__ import annotations

import contextlib
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from norga.models.checkpoints import first_line
from norga.registry import registrar

from . import gpu_check_env as env
from . import gpu_check_prepare as prep
from .gpu_check_expect import judge

Emit = Callable[[str, object], None]
STEPS: Dict[str, Callable] = {}
register_step = registrar(STEPS, "gpu check step")
# seconds per step, each from its worker process's start (imports, CUDA context) to its end: (one H200 from cold,
# an idle 2-core CPU with --tiny); docs/gpus.md's budget table is :func:`bench.gpu_check_report.budget_table`
BUDGETS = {"environment": (60, 30), "attention": (30, 30), "attention_profile": (25, 30), "smoke": (100, 120),
           "small_task": (90, 60), "timing": (45, 45), "compile": (45, 60)}
# steps whose timeout or skip leaves the verdict alone (a compile that does not finish: "not measured", the eager
# rates stand); their failure still counts
OPTIONAL_STEPS = ("compile",)
START_S = 15  # the check's process start before its clock (interpreter, imports, the prepared folder's checksums)
REPORT_S = 10  # the summaries written after every step and at the end, and the scratch clean-up
# |FA(device) - FA(CPU reference)| and the largest |entry difference| of the accuracy matrices, in points: a
# numerics-only difference moves a few of the 100 test images of a task; a broken device path (attention,
# autocast, data) costs tens of points
FA_TOLERANCE = {"off": 3.0, "bf16": 5.0}
ENTRY_TOLERANCE = 10.0


class NoDevice(RuntimeError):
    """The device asked for does not exist here: the one failure that stops the other steps."""
    fatal = True


@dataclass
class Context:
    """What every step gets: the device, --tiny, the prepared folder, the output folder (small files only), the
    scratch folder (run folders with checkpoints; outside ``out``, deleted at the end), the step's wall deadline
    (``time.time()`` seconds) and the whole check's."""
    device: torch.device
    tiny: bool
    data: Path
    out: Path
    scratch: Path
    deadline: float
    check_deadline: float


@contextlib.contextmanager
def logged(path: Path):
    """Send everything printed inside (norga's run logs, progress bars) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


@contextlib.contextmanager
def peak_memory(device: torch.device, into: dict):
    """Put the enclosed code's peak CUDA memory (MiB, ``max_memory_allocated``) into ``into["peak_mib"]`` (None on
    the CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    yield
    into["peak_mib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 20) if device.type == "cuda" else None


def say(line: str) -> None:
    print(f"[gpu_check] {line}", flush=True)


@register_step("environment")
def environment(ctx: Context, emit: Emit) -> dict:
    """Versions, the device, bf16, optional packages, compilers and Python headers; fails (and stops the check)
    only when CUDA was asked for and torch sees none."""
    import timm
    import torchvision

    import norga

    out = {"python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
           "timm": timm.__version__, "norga": norga.__version__, "norga_path": str(Path(norga.__file__).parent),
           "cuda_runtime": torch.version.cuda, "device": str(ctx.device), "cpu_threads": torch.get_num_threads(),
           **env.environment_extras()}
    emit("software", out)
    if ctx.device.type == "cuda":
        if not torch.cuda.is_available():
            raise NoDevice("--device cuda but torch sees no CUDA device (torch.cuda.is_available() is False): "
                           "check the driver and CUDA_VISIBLE_DEVICES, or install a CUDA build of torch")
        out.update(cuda_details(ctx.device))
    missing = [d for d, v in out["optional_packages"].items() if v is None]
    say(f"device {out.get('gpu', ctx.device)}, torch {out['torch']}, timm {out['timm']}; optional packages "
        f"missing: {', '.join(missing) or 'none'}; compilers: "
        f"{', '.join(n for n, p in out['compilers'].items() if p) or 'none'}; Python.h "
        f"{'present' if out['python_headers']['present'] else 'absent'}")
    out["passed"] = True
    return out


def cuda_details(device: torch.device) -> dict:
    """The GPU's name, capability, memory and bf16 support (a detail that cannot be read is its error, not fatal)."""
    try:
        props = torch.cuda.get_device_properties(device)
        return {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
                "memory_mib": props.total_memory // 2 ** 20, "bf16": torch.cuda.is_bf16_supported(),
                "cudnn": torch.backends.cudnn.version(), "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    except Exception as err:  # the device exists; what it reports is information only
        return {"gpu_details_error": f"{type(err).__name__}: {first_line(err)}"}


def probe_vit(ctx: Context):
    from .gpu_check_timing import FULL, TINY, random_vit

    spec = TINY if ctx.tiny else FULL
    return random_vit(spec).to(ctx.device), spec


@register_step("attention")
def attention(ctx: Context, emit: Emit) -> dict:
    """The prefix attention and a prompted model under the fused SDPA backends only, fp32 and bf16."""
    from .gpu_check_attention import sdpa_check

    vit, spec = probe_vit(ctx)
    out = sdpa_check(vit, ctx.device, spec["size"])
    for amp, d in out["dtypes"].items():
        say(f"SDPA at head dim {out['augmented_head_dim']} ({amp}): fused-only {d['prefix_restricted']['status']}, "
            f"model {d['model_restricted']['status']}")
    return out


@register_step("attention_profile")
def attention_profile(ctx: Context, emit: Emit) -> dict:
    """The SDPA backends the profiler sees for the unrestricted prefix call (its own worker: CUPTI)."""
    from .gpu_check_attention import profile_check

    vit, _ = probe_vit(ctx)
    out = profile_check(vit, ctx.device)
    for amp, d in out["dtypes"].items():
        say(f"SDPA at head dim {out['augmented_head_dim']} ({amp}): profiler saw {d['prefix_profiled']['backends']}")
    return out


@register_step("smoke")
def smoke(ctx: Context, emit: Emit) -> dict:
    """Every registered method's smoke config on the device in fp32 (amp off) and bf16 autocast; a method that
    needs a missing optional package (scikit-learn's K-means) is skipped with the reason, not failed."""
    from norga.config import load_config, method_configs

    reference = prep.read_reference(ctx.data).get("smoke_FA", {}) if ctx.data else {}
    runs, failed, missing = {}, [], {}
    for name in sorted(method_configs()):
        for amp in ("off", "bf16"):
            if name in missing:
                result = {"skipped": env.missing_reason(missing[name]), "missing": missing[name]}
            else:
                result = smoke_run(ctx, name, amp, load_config, reference.get(name))
            if "missing" in result:
                missing[name] = result["missing"]
            elif "error" in result:
                failed.append(f"{name}/{amp}")
            runs[f"{name}/{amp}"] = result
            emit(f"{name}/{amp}", result)
            say(f"smoke {name:10s} {amp:4s} " + (f"FA {result['FA']:.3f} in {result['seconds']:.1f} s"
                                               if "FA" in result else result.get("error") or result["skipped"]))
    outside = sorted(key for key, r in runs.items() if (r.get("expect") or {}).get("within") is False)
    return {"runs": runs, "failed": failed, "skipped": sorted(f"{m} (needs {d})" for m, d in missing.items()),
            "outside_band": outside, "passed": not failed and not outside}


def smoke_run(ctx: Context, name: str, amp: str, load_config, cpu_fa: Optional[float]) -> dict:
    """One smoke run: its FA, seconds, CPU FA and peak memory; its error; or its skip (a missing package)."""
    cfg = load_config(prep.REPO / "configs" / "smoke" / f"{name}.yaml", [f"device={ctx.device}", f"amp={amp}"])
    try:
        memory: dict = {}
        with logged(ctx.out / "logs" / f"smoke_{name}_{amp}.log"), peak_memory(ctx.device, memory):
            result = prep.train(cfg, ctx.scratch / "smoke" / f"{name}_{amp}",
                                keep=ctx.out / "metrics" / f"smoke_{name}_{amp}.json")
        return {"FA": result["FA"], "seconds": result["seconds"], "cpu_FA": cpu_fa,
                "expect": judge(name, result["FA"], cpu_fa, amp), **memory}
    except ImportError as err:
        dist = env.optional_module_of(err)
        if dist is None:
            return {"error": f"{type(err).__name__}: {first_line(err)}"}
        return {"skipped": env.missing_reason(dist), "missing": dist}
    except Exception as err:  # one method's failure is its row, the others still run
        return {"error": f"{type(err).__name__}: {first_line(err)}"}


def compare(reference: dict, got: dict, amp: str) -> dict:
    """Entry-wise differences of two accuracy matrices (fractions) in points, against the stated tolerances."""
    pairs = [(a, b) for ra, rb in zip(reference["acc_matrix"], got["acc_matrix"]) for a, b in zip(ra, rb)
             if a is not None and b is not None]
    entry = max(abs(a - b) for a, b in pairs) * 100
    fa = (got["FA"] - reference["FA"]) * 100
    return {"FA": got["FA"], "cpu_FA": reference["FA"], "FA_diff_points": round(fa, 2),
            "max_entry_diff_points": round(entry, 2), "tolerance": {"FA": FA_TOLERANCE[amp], "entry": ENTRY_TOLERANCE},
            "within": abs(fa) <= FA_TOLERANCE[amp] and entry <= ENTRY_TOLERANCE,
            "acc_matrix": got["acc_matrix"], "seconds": got["seconds"]}


@register_step("small_task")
def small_task(ctx: Context, emit: Emit) -> dict:
    """NoRGa on the prepared task on the device in fp32 (compared with the CPU run), then in bf16 if time is left."""
    manifest = prep.verify(ctx.data)
    reference = prep.read_reference(ctx.data)
    out: Dict[str, object] = {"checksums": "ok", "files_mib": round(manifest["total_bytes"] / 2 ** 20, 2),
                              "cpu_seconds": reference["seconds"]}
    last: Optional[float] = None
    for amp in ("off", "bf16"):
        left = ctx.deadline - time.time()
        if last is not None and last * 1.3 > left:
            out[amp] = {"skipped": f"the fp32 run took {last:.0f} s and {left:.0f} s of the step's budget are left"}
            emit(amp, out[amp])
            say(f"small task {amp}: skipped ({out[amp]['skipped']})")
            continue
        cfg = prep.folder_config(ctx.data, [f"device={ctx.device}", f"amp={amp}"])
        memory: dict = {}
        with logged(ctx.out / "logs" / f"small_task_{amp}.log"), peak_memory(ctx.device, memory):
            got = prep.train(cfg, ctx.scratch / "small_task" / amp,
                             keep=ctx.out / "metrics" / f"small_task_{amp}.json")
        out[amp] = {**compare(reference, got, amp), **memory}
        emit(amp, out[amp])
        last = got["seconds"]
        say(f"small task {amp}: FA {got['FA'] * 100:.2f} (CPU {reference['FA'] * 100:.2f}), max entry diff "
            f"{out[amp]['max_entry_diff_points']:.1f} points, {'within' if out[amp]['within'] else 'OUTSIDE'} "
            f"tolerance, {got['seconds']:.0f} s")
    out["passed"] = all(out[a]["within"] for a in ("off", "bf16") if "within" in out[a])
    return out


def timing_say(emit: Emit) -> Callable[[str, dict], None]:
    def each(key: str, value: dict) -> None:
        emit(key, value)
        peak = f", peak {value['peak_mib']} MiB" if value["peak_mib"] is not None else ""
        say(f"timing {key}: {value['img_s']:.0f} img/s (first call {value['first_s']:.1f} s{peak})")
    return each


@register_step("timing")
def timing(ctx: Context, emit: Emit) -> dict:
    """The five passes eager, bf16 (the rates of gpu_rates.json)."""
    from .gpu_check_timing import timing_step

    out = timing_step(ctx.device, ctx.tiny, timing_say(emit), modes=("eager",))
    out["passed"] = True
    return out


@register_step("compile")
def compiled(ctx: Context, emit: Emit) -> dict:
    """The five passes through ``torch.compile`` (optional: skipped without a compiler, "not measured" on a
    timeout; Inductor's first compile on a cold cache can take minutes)."""
    from .gpu_check_timing import compile_backend, timing_step

    backend = compile_backend(ctx.tiny)
    missing = env.compile_missing(ctx.device, backend)
    if missing:
        raise env.StepSkipped(f"torch.compile ({backend}) needs {', '.join(missing)}, not found here; the eager "
                              "rates stand", missing)
    out = timing_step(ctx.device, ctx.tiny, timing_say(emit), modes=("compiled",))
    out["passed"] = True
    return out


def step_names() -> List[str]:
    return list(STEPS)
