"""What does the quick GPU check's schedule cut cost? A CPU analogue, pre-registered (issue #34).

    python -m studies.schedule_cut.run                      # hideprompt and norga, full and cut, 3 seeds; resumable
    python -m studies.schedule_cut.run --seeds 42 --only norga        # a part of it (rows are merged)
    python -m studies.schedule_cut.run --report             # re-render schedule_cut.md (here) from the rows
    python -m studies.schedule_cut.run --check              # exit 1 when the committed report is not the rows'
    python -m studies.schedule_cut.run --write-expected     # the derived ranges into configs/reproduce/quick_gpu.yaml
    python -m studies.schedule_cut.run --quick              # tiny ViT, synthetic data: a check of the mechanism
    python -m studies.schedule_cut.run --merge runs/lanes/a runs/lanes/b   # rows of parallel processes (own --results)

**Runs.** For every cell of ``configs/reproduce/quick_gpu.yaml`` (HiDe-Prompt and NoRGa) and seed: the cell's
shipped config (``config:``, its method section untouched) on the analogue below, once with the FULL schedule as
shipped and once with the CUT schedule = the cell's ``overrides`` read from the manifest, less its GPU-path keys
(:data:`GPU_PATH_KEYS`: device, amp, workers). Full and cut of a seed share data subset, class order and
initialisation (paired). Each run is an ordinary run folder under ``--runs-dir`` (resumes after a kill); its row
(FA, CA in %, FM in points, from ``metrics.json``'s ``official`` block as ``norga reproduce`` reports them;
minutes of training + evaluation) is appended to ``studies/schedule_cut/schedule_cut.json`` as it finishes, and a row
already there with the same settings is skipped. A changed manifest or analogue gives new settings, so new run
folders and new rows.

**The analogue** (:data:`ANALOGUE`): CIFAR-100 classes 0-49 from ``../shared/data/cifar100.npz`` (written once
as ``--data-dir``/cifar100_first50.npz by ``bench.regime_data``), 10 tasks x 5 classes, class order drawn as the
GPU cell draws it (``class_order_rng: python``, over 50 classes), the authors' CIFAR transforms, 20 training and 10
test images per class (1000 / 500), DINOv2 ViT-S/14 (``../shared/weights/dinov2_vits14_imgfocus.safetensors``) at
56 px, CPU, one thread. Why 50 classes: TAP and the TII alignment draw pseudo-features per class seen, so their
cost does not shrink with the images (NoRGa's 80 TAP epochs alone take about 15 min per run at 100 classes), and
10 tasks of 10 classes would leave fewer than 8 training images per class for a 40-minute run.

Estimate, made before any run of this bench from the per-epoch seconds of a short timing run on this machine
(NoRGa's full method section, 10 tasks x 10 classes x 12 images, one thread, nice 19 beside two benchmarks; its
``epochs.jsonl``): a WTP epoch 27 ms per training image (one optimizer step of 120 images: 3.2 s), a TII epoch on
augmented images 13 ms per image, a TAP epoch 25 ms per old class (640 pseudo-features each), a TII-alignment
epoch 14 ms per old class, about 10 s per task for feature extraction, diagnostics, evaluation and checkpoints.
Hence a FULL run = WTP 50 x 1000 x 27 ms (22.5 min) + TII 20 x 1000 x 13 ms (4.3 min) + TAP (NoRGa 80 epochs
7.5 min, HiDe-Prompt 30 epochs 2.8 min) + alignment (1.6 min) + per-task work (1.7 min) = **about 38 min
(NoRGa), 33 min (HiDe-Prompt)**; a CUT run = WTP 4.5 + TII 1.1 min + the same rest = **about 16 / 12 min**; the
grid (2 methods x 3 seeds x both schedules) about 5 h. What the analogue cannot keep: with the shipped batch of
128 a task of 100 images is one optimizer step per epoch (the GPU cell: 40), so both schedules train far less
than on the GPU and the cut removes most of what little training there is; and ViT-S/14 at 56 px on 20 images per
class lands far below the cell's 92-94 % FA. The measured cost of the cut is the analogue's, not the GPU cell's;
the rule below turns it into a range anyway, and says so beforehand.

PRE-REGISTERED (written 2026-11-26, before any run of this bench; not changed after seeing results)

* Seeds 42, 40, 44 (the paper's); more seeds may be added, every seed with both schedules finished counts.
* Statistic: per method and metric M in {FA, CA, FM}, the paired difference cut − full over those seeds, its mean
  and 95% Student-t interval [L, H] (``norga.reports.summary_stats.paired``), in points.
* Expected range of the quick GPU cell: ``[P + L − 2·S, P + H + 2·S]``, with P ± S the published full-schedule
  mean ± std of the same method in ``configs/reproduce/paper.yaml`` (Table 1, Split CIFAR-100, Sup-21K; a std the
  paper does not print counts as 0), clipped to what M can take (FA, CA in [0, 100] %, FM in [−100, 100]
  points; ``norga.reports.summary_stats.BOUNDS``), then rounded outward to 0.1.
* ``--write-expected`` writes these ranges into the manifest's ``expected:`` fields only when every method has at
  least 3 paired seeds, and refuses otherwise naming the missing rows.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

from bench.row_merge import (Keying, MergeError, add_clash_arguments, clash_mode, load_rows, merge_rows,
                             merge_summary, result_file, rows_path, rows_with)
from norga.config import ConfigError
from norga.errors import NorgaError
from norga.reproduce.manifest import QUICK_MANIFEST, Cell, load_manifest
from studies.generated import write_or_check
from studies.schedule_cut import report

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "studies" / "schedule_cut" / "schedule_cut"
SEEDS = (42, 40, 44)
SCHEDULES = report.SCHEDULES  # ("full", "cut")
GPU_PATH_KEYS = ("device", "amp", "data.num_workers")  # the quick check's GPU path; the analogue sets its own
DATA_FILE, WEIGHTS_FILE = "data/cifar100.npz", "weights/dinov2_vits14_imgfocus.safetensors"  # under --shared
ANALOGUE = ("device=cpu", "eval_batch_size=100", "data.name=array", "data.num_tasks=10", "data.classes_per_task=5",
            "data.transforms=cifar", "data.image_size=56", "data.train_per_class=20", "data.test_per_class=10",
            "data.num_workers=0", "model.preset=null", "model.name=vit_small_patch14_dinov2", "model.pretrained=false")
QUICK = ("device=cpu", "data.name=synthetic", "data.root=null", "data.num_tasks=2", "data.classes_per_task=5",
         "data.image_size=16", "data.options={num_classes: 10, train_per_class: 4, test_per_class: 2, size: 16}",
         "data.num_workers=0", "model.preset=null", "model.name=vit_base_patch16_224", "model.pretrained=false",
         "model.checkpoint=null", "model.timm_kwargs={patch_size: 8, embed_dim: 16, depth: 5, num_heads: 2}")


class ScheduleCutError(Exception):
    """Unusable input of the bench (the message names the fix)."""


def override_key(item: str) -> str:
    return item.partition("=")[0].strip()


def cut_overrides(cell: Cell) -> List[str]:
    """The cell's schedule cut: its manifest ``overrides`` without the GPU-path keys (method keys only)."""
    kept = [o for o in cell.overrides if override_key(o) not in GPU_PATH_KEYS]
    foreign = [o for o in kept if not override_key(o).startswith("method.")]
    if foreign:
        raise ScheduleCutError(f"cell {cell.id}: override(s) {foreign} are neither GPU-path keys {list(GPU_PATH_KEYS)} "
                               "nor method keys; the CPU analogue applies only the method keys of the cut: name the "
                               "key in GPU_PATH_KEYS of studies/schedule_cut/run.py if the analogue should drop it")
    return kept


def quick_cells(manifest: Path) -> Dict[str, Cell]:
    """Method name -> the quick check's runnable cell of that method (one per method)."""
    cells = [c for c in load_manifest(manifest).cells if c.runnable]
    methods = [c.method for c in cells]
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise ScheduleCutError(f"{manifest}: more than one runnable cell of method(s) {repeated}; the bench pairs one "
                               "cell per method")
    return {c.method: c for c in cells}


def settings(cell: Cell, schedule: str, quick: bool) -> List[str]:
    """A run's overrides without the seed and the machine's paths: the analogue, then the schedule's keys."""
    return [*(QUICK if quick else ANALOGUE), *(cut_overrides(cell) if schedule == "cut" else [])]


def tag(items: Sequence[str]) -> str:
    """8 hex digits naming a list of overrides (run folders of different settings never mix)."""
    return hashlib.sha256(json.dumps(list(items)).encode()).hexdigest()[:8]


def run_config(cell: Cell, schedule: str, seed: int, paths: Sequence[str], quick: bool):
    """The run's resolved config: the cell's shipped config + analogue + schedule + paths + seed."""
    from norga.config import load_config

    return load_config(cell.config_path, [*settings(cell, schedule, quick), *paths, f"seed={seed}"])


def run_one(cell: Cell, schedule: str, seed: int, args) -> dict:
    """Train (or resume, or read) one run; its row (FA, CA in %, FM in points, minutes)."""
    import torch

    from norga.engine import run_training
    from norga.reproduce.report import run_values

    items = settings(cell, schedule, args.quick)
    folder = args.runs_dir / f"{cell.method}_{schedule}_{tag(items)}_seed{seed}"
    start = time.time()
    metrics = run_training(run_config(cell, schedule, seed, args.paths, args.quick), folder)
    if metrics.get("completed_tasks") != metrics.get("num_tasks"):
        raise ScheduleCutError(f"{folder}: the run stopped before its last task; run the command again to resume it")
    values = run_values(metrics)
    minutes = sum(metrics["task_seconds"]) / 60  # training + evaluation of every task, across resumes
    row = {"method": cell.method, "schedule": schedule, "seed": seed, **values, "minutes": minutes,
           "threads": torch.get_num_threads(), "settings": items, "folder": folder.name}
    print(f"{cell.method} {schedule} seed {seed}: " + "  ".join(f"{k} {values[k]:.2f}" for k in values)
          + f"  ({(time.time() - start) / 60:.1f} min in this call)", flush=True)
    return row


def machine_paths(args) -> List[str]:
    """``data.root`` (classes 0-49, built once) and ``model.checkpoint`` of the analogue (none with --quick)."""
    if args.quick:
        return []
    from bench.regime_data import cifar100_first50_root

    data, weights = args.shared / DATA_FILE, args.shared / WEIGHTS_FILE
    missing = [str(p) for p in (data, weights) if not p.is_file()]
    if missing:
        raise ScheduleCutError(f"missing {', '.join(missing)} (../shared/data/README.md, ../shared/weights/README.md); "
                               f"pass --shared DIR holding {DATA_FILE} and {WEIGHTS_FILE}")
    return [f"data.root={cifar100_first50_root(args)}", f"model.checkpoint={weights}"]


def run_grid(args, cells: Dict[str, Cell]) -> List[dict]:
    """Every (method, schedule, seed) without a row of the current settings, in order; rows saved as they finish."""
    rows = load_rows(args.results)
    for seed in args.seeds:
        for method in args.only or sorted(cells):
            for schedule in SCHEDULES:
                items = settings(cells[method], schedule, args.quick)
                if rows_with(rows, method=method, schedule=schedule, seed=seed, settings=list(items)):
                    continue
                row = run_one(cells[method], schedule, seed, args)
                rows = [r for r in rows if (r["method"], r["schedule"], r["seed"]) != (method, schedule, seed)] + [row]
                report.save(rows, args.results, context(args, cells))
    return rows


RUN = Keying(key=lambda r: (r["method"], r["schedule"], int(r["seed"])), text=lambda k: f"{k[0]} {k[1]} seed {k[2]}",
             group=lambda r: r["method"], unknown="is no method of the manifest's cells ({groups})")


def merge(args, cells: Dict[str, Cell]) -> None:
    """--merge: the lanes' rows (each lane ran other methods or seeds with its own --results) into --results; a
    run two files hold with different values (e.g. other settings) is one clear error, unless --replace or
    --keep."""
    try:
        rows, added, clashed = merge_rows(load_rows(args.results),
                                          [(str(s), load_rows(s)) for s in args.merge], sorted(cells),
                                          args.on_clash, RUN)
    except MergeError as err:
        raise ScheduleCutError(str(err))
    report.save(rows, args.results, context(args, cells))
    print(merge_summary(added, clashed, len(rows), args.on_clash))


def context(args, cells: Dict[str, Cell]) -> dict:
    """What the report needs besides the rows (``studies.schedule_cut.report``'s ``ctx``), from the command line."""
    return make_context(cells, args.manifest, args.quick, args.seeds)


def make_context(cells: Dict[str, Cell], manifest: Path, quick: bool, seeds: Sequence[int]) -> dict:
    """The cells, the settings a row must have to count, the manifest, the mode and the seeds."""
    current = {(m, s): settings(c, s, quick) for m, c in cells.items() for s in SCHEDULES}
    return {"cells": cells, "current": current, "manifest": Path(manifest), "quick": quick, "seeds": list(seeds)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=None, help=f"default {list(SEEDS)} (--quick: the first)")
    p.add_argument("--only", nargs="+", default=None, metavar="METHOD", help="methods to run (default: every cell's)")
    p.add_argument("--quick", action="store_true", help="tiny ViT and synthetic data (a check of the mechanism)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--report", action="store_true", help="only re-render the .md from the rows in the .json")
    mode.add_argument("--check", action="store_true", help="only check that the committed .md is the rows' (exit 1)")
    mode.add_argument("--merge", nargs="+", type=Path, default=None, metavar="STEM",
                      help="add the rows of these results stems (parallel processes' --results) to --results")
    mode.add_argument("--write-expected", action="store_true",
                      help="write the derived ranges into the manifest's expected: fields (needs >= 3 paired seeds)")
    p.add_argument("--manifest", type=Path, default=REPO / QUICK_MANIFEST, help="the quick check's manifest")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="folder with data/ and weights/")
    p.add_argument("--data-dir", type=Path, default=REPO / "runs" / "bench_data", help="where the 50-class file goes")
    p.add_argument("--runs-dir", type=Path, default=None, help="run folders (default runs/schedule_cut[_quick])")
    p.add_argument("--results", type=Path, default=None,
                   help="stem of the .json rows and .md report (default studies/schedule_cut/schedule_cut[_quick])")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the estimate assumes 1)")
    add_clash_arguments(p)
    args = p.parse_args(argv)
    args.on_clash = clash_mode(p, args)
    suffix = "_quick" if args.quick else ""
    args.runs_dir = args.runs_dir or REPO / "runs" / f"schedule_cut{suffix}"
    args.results = args.results or RESULTS.with_name(f"schedule_cut{suffix}")
    args.seeds = args.seeds or list(SEEDS[:1] if args.quick else SEEDS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cells = quick_cells(args.manifest)
        unknown = sorted(set(args.only or []) - set(cells))
        if unknown:
            raise ScheduleCutError(f"--only: unknown method(s) {unknown}; the manifest's: {sorted(cells)}")
        if args.write_expected:
            ranges = report.write_expected(load_rows(args.results), context(args, cells))
            print(f"wrote expected ranges into {args.manifest}: {ranges}\nnow update the manifest's header comment by "
                  "hand and run python -m bench.readme_tables (docs/reproduce.md's table is generated)")
            return 0
        if args.merge:
            merge(args, cells)
        elif not (args.report or args.check):
            import torch

            torch.set_num_threads(args.threads)
            args.paths = machine_paths(args)
            run_grid(args, cells)
        rows = load_rows(args.results)
        if not rows:
            raise ScheduleCutError(f"no rows in {rows_path(args.results)}; run the benchmark first")
        if args.check:
            return write_or_check(result_file(args.results, ".md"), report.markdown(rows, context(args, cells)), True)
        report.save(rows, args.results, context(args, cells))
    except (ScheduleCutError, report.ReportError, NorgaError, ConfigError) as err:  # a run's error names its fix
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result_file(args.results, ".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
