"""Speed report: the NoRGa authors' code and norga on the small task, side by side, wall time per stage.

    python -m crosscheck.speed.report --ref CHECKOUT --ref-pythonpath PATHS [--seeds 42 40 44] [--threads 2]
        [--work runs/crosscheck/speed] [--shared ../shared] [--sides reference norga]
    python -m crosscheck.speed.report --report-only      # re-render the report from the committed JSON

For each seed, one side after the other in child processes of this one, each with ``--threads`` torch threads
(and OMP_NUM_THREADS): the reference as its two processes (stage 1: task-identity head; stage 2: prompts and
classifier; crosscheck/speed/reference_side.py, run with ``PYTHONPATH=PATHS:REPO``: PATHS puts timm 0.6.7 and
its extras first) and norga as one ``norga train`` of configs/crosscheck/norga.yaml (crosscheck/speed/norga_side.py).
Each (side, seed) is kept in WORK/timings/ once it finished, so a rerun resumes. Writes
bench/results/speed_report.json and .md (the table of docs/crosscheck.md, ``python -m bench.readme_tables``).
CHECKOUT: ``git clone https://github.com/Minhchuyentoancbn/MoE_PromptCL CHECKOUT && git -C CHECKOUT checkout e418337``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from crosscheck.speed.tables import REPORT, summarise, write_report

REPO = Path(__file__).resolve().parents[2]
SIDES = ("reference", "norga")


def prepare_inputs(work: Path, shared: Path) -> tuple:
    """The small task's .npz and the converted backbone (state dict, float32) in ``work``, made once."""
    import numpy as np
    import torch
    from crosscheck.harness.small_task import small_task
    work.mkdir(parents=True, exist_ok=True)
    npz, weights = work / "cifar50_small.npz", work / "dinov2_vits14_56px.pt"
    if not npz.exists():
        np.savez(npz, **small_task(np.load(shared / "data" / "cifar100.npz")))
    if not weights.exists():
        from norga.config import load_config
        from norga.engine.task_loop import build_vit, resolve_config
        checkpoint = shared / "weights" / "dinov2_vits14_imgfocus.safetensors"
        cfg = resolve_config(load_config(REPO / "configs" / "crosscheck" / "norga.yaml",
                                         [f"model.checkpoint={checkpoint}", f"data.root={npz}"]))
        torch.save({k: v.float() for k, v in build_vit(cfg).state_dict().items()}, weights)
    return npz, weights


def run_child(command: List[str], env: dict, log: Path) -> float:
    """Run ``command`` with ``--t0`` = now appended, its output to ``log``; wall seconds; raises on failure."""
    t0 = time.time()
    with log.open("w") as out:
        code = subprocess.call([*command, "--t0", repr(t0)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    wall = time.time() - t0
    if code:
        raise SystemExit(f"{' '.join(command[:4])} ... failed (exit {code}); its output: {log}")
    return wall


def child_env(threads: int, pythonpath: str) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": pythonpath,
            "PYTHONUNBUFFERED": "1"}


def run_side(side: str, seed: int, args, npz: Path, weights: Path) -> dict:
    """One (side, seed): its processes, their timings combined (seconds per stage summed, wall measured here)."""
    folder = args.work / f"{side}_s{seed}"
    if folder.exists():
        shutil.rmtree(folder)  # an unfinished earlier attempt
    folder.mkdir(parents=True)
    timings, walls = folder / "timings.jsonl", []
    if side == "reference":
        env = child_env(args.threads, f"{args.ref_pythonpath}{os.pathsep}{REPO}")
        for stage in (1, 2):
            walls.append(run_child([sys.executable, "-m", "crosscheck.speed.reference_side", "--ref", str(args.ref),
                                    "--stage", str(stage), "--weights", str(weights), "--data", str(npz), "--work",
                                    str(folder), "--seed", str(seed), "--threads", str(args.threads),
                                    "--timings", str(timings)], env, folder / f"stage{stage}.log"))
    else:
        env = child_env(args.threads, str(REPO))
        walls.append(run_child([sys.executable, "-m", "crosscheck.speed.norga_side", "--data", str(npz), "--out",
                                str(folder / "run"), "--seed", str(seed), "--threads", str(args.threads),
                                "--timings", str(timings)], env, folder / "train.log"))
    records = [json.loads(line) for line in timings.read_text().splitlines()]
    for stage_folder in ("stage1", "stage2"):  # their checkpoints: the whole ViT after every task, ~0.9 GB a seed
        shutil.rmtree(folder / stage_folder, ignore_errors=True)
    return combine(side, seed, args.threads, records, walls)


def combine(side: str, seed: int, threads: int, records: List[dict], walls: List[float]) -> dict:
    """One row: wall and CPU seconds per stage summed over the side's processes; ``other`` = the process time not in
    a timed stage (wall: measured here; CPU: the processes' own count)."""
    seconds, cpu = _summed(records, "seconds"), _summed(records, "cpu")
    wall = sum(walls)
    seconds["other"] = wall - sum(s for k, s in seconds.items() if k != "other")
    process_cpu = sum(r.get("process_cpu", 0.0) for r in records)
    if cpu:
        cpu["other"] = process_cpu - sum(s for k, s in cpu.items() if k != "other")
    matrix = next(r["acc_matrix"] for r in reversed(records) if "acc_matrix" in r)
    if side == "reference":  # their percentages, zeros below the diagonal -> fractions, None below
        matrix = [[None if j < i else v / 100 for j, v in enumerate(row)] for i, row in enumerate(matrix)]
    return {"side": side, "seed": seed, "threads": threads, "wall": wall, "process_walls": walls,
            "seconds": seconds, "cpu_total": process_cpu, "cpu": cpu, "acc_matrix": matrix}


def _summed(records: List[dict], key: str) -> dict:
    out: dict = {}
    for r in records:
        for stage, s in r.get(key, {}).items():
            out[stage] = out.get(stage, 0.0) + s
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", type=Path, help="checkout of Minhchuyentoancbn/MoE_PromptCL at e418337")
    p.add_argument("--ref-pythonpath", default="", help="paths before the venv's packages for the reference "
                   "(timm 0.6.7 and six/easydict), e.g. /work/ref/timm-0.6.7:/work/ref/extras")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 40, 44])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--work", type=Path, default=REPO / "runs" / "crosscheck" / "speed")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--results", type=Path, default=REPORT)
    p.add_argument("--report-only", action="store_true", help="re-render --results' .md from its JSON")
    args = p.parse_args(argv)
    if args.report_only:
        write_report(json.loads(args.results.read_text()), args.results)
        return 0
    if "reference" in args.sides and (args.ref is None or not (args.ref / "main.py").exists()):
        p.error("--ref must be a checkout of Minhchuyentoancbn/MoE_PromptCL (its main.py is missing)")
    npz, weights = prepare_inputs(args.work, args.shared)
    done = args.work / "timings"
    done.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for side in args.sides:
            row_file = done / f"{side}_s{seed}.json"
            if not row_file.exists():
                print(f"{time.strftime('%H:%M:%S')} {side} seed {seed} ...", flush=True)
                row_file.write_text(json.dumps(run_side(side, seed, args, npz, weights), indent=1) + "\n")
            row = json.loads(row_file.read_text())
            print(f"{time.strftime('%H:%M:%S')} {side} seed {seed}: {row['wall']:.1f} s", flush=True)
            rows.append(row)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    report = summarise(rows, {"threads": args.threads, "seeds": args.seeds, "cpu": platform.processor() or
                              platform.machine(), "cores": os.cpu_count(), "load_after": load,
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    write_report(report, args.results)
    print(f"wrote {args.results} and {args.results.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
