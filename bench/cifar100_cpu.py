"""Reduced-scale Split CIFAR-100 on a 2-core CPU: NoRGa vs HiDe-Prompt (linear gate) vs no prompts.

    python bench/cifar100_cpu.py                      # the five runs below, seed 42 (< 90 min on 2 cores)
    python bench/cifar100_cpu.py --only hideprompt norga_tanh --seeds 43
    python bench/cifar100_cpu.py --quick              # a few minutes: 2 tasks x 50 classes, 3 train images per class

Every run uses ``configs/bench/cifar100_cpu.yaml`` (real CIFAR-100 from ``../shared/data/cifar100.npz``,
DINOv2 ViT-S/14 from ``../shared/weights``; its header lists every reduction from the paper's setup) and
changes only what ``RUNS`` says, so data, seed, class order and budget are identical. Each run is a normal
run directory under ``--runs-dir`` (re-running resumes it; a finished run is only re-read), and its row is
added to ``bench/results/cifar100_cpu.md`` / ``.json`` as soon as it finishes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from norga.config import load_config  # noqa: E402
from norga.continual import run_training  # noqa: E402

BASE_CONFIG = REPO / "configs" / "bench" / "cifar100_cpu.yaml"
DATA_FILE, WEIGHTS_FILE = "data/cifar100.npz", "weights/dinov2_vits14_imgfocus.safetensors"

# name -> config overrides on top of BASE_CONFIG (the only differences between runs)
RUNS = {
    "hideprompt": ["method.gate={name: linear}"],
    "norga_tanh": ["method.gate.name=norga", "method.gate.activation=tanh"],
    "norga_sigmoid": ["method.gate.name=norga", "method.gate.activation=sigmoid"],
    "norga_gelu": ["method.gate.name=norga", "method.gate.activation=gelu"],
    "no_prompt": ["method.prompt_length=0"],
}
QUICK = ["data.num_tasks=2", "data.classes_per_task=50", "data.train_per_class=3", "data.test_per_class=2",
         "method.wtp.epochs=1",
         "method.tii.epochs=5", "method.tii.align_epochs=2", "method.tap.epochs=2"]
COLUMNS = ("run", "seed", "FA", "CA", "FM", "FM_official", "CA_official", "TII", "TIL_FA", "minutes")
PERCENT_COLUMNS = COLUMNS[2:-1]


def check_shared(shared: Path) -> None:
    """Exit with a clear message when the real data or weights are missing."""
    missing = [shared / f for f in (DATA_FILE, WEIGHTS_FILE) if not (shared / f).is_file()]
    if missing:
        sys.exit(
            "error: this benchmark needs the project's offline copies of real data and weights:\n"
            + "".join(f"  missing: {m}\n" for m in missing)
            + f"  {shared / DATA_FILE}: CIFAR-100 as an .npz with train_x/train_y/test_x/test_y (uint8 NHWC),\n"
            f"  {shared / WEIGHTS_FILE}: DINOv2 ViT-S/14 weights in timm's layout (safetensors).\n"
            "They live in ../shared on the project's machines (see ../shared/*/README.md); elsewhere, export\n"
            "them yourself (torchvision CIFAR100 -> npz; timm 'vit_small_patch14_dinov2' -> safetensors) and\n"
            "pass --shared DIR."
        )


def row_of(name: str, seed: int, metrics: dict, minutes: float) -> dict:
    """One table row; accuracies as fractions, TII = mean final task-identity accuracy over tasks."""
    tii = metrics["tii_accuracy"]
    return {"run": name, "seed": seed, "FA": metrics["FA"], "CA": metrics["CA"], "FM": metrics["FM"],
            "FM_official": metrics["FM_official"], "CA_official": metrics["official"]["CA"],
            "TII": sum(tii) / len(tii), "TIL_FA": metrics["til_FA"], "minutes": minutes}


def markdown_table(rows: list) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["run"], str(r["seed"])] + [f"{100 * r[k]:.2f}" for k in PERCENT_COLUMNS]
        lines.append("| " + " | ".join(cells + [f"{r['minutes']:.1f}"]) + " |")
    return "\n".join(lines) + "\n"


def save_rows(rows: list, results: Path, header: str) -> None:
    """Write the .json rows and the .md table (accuracies in %, wall time in minutes) atomically."""
    results.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((results.with_suffix(".json"), json.dumps(rows, indent=1)),
                       (results.with_suffix(".md"), header + "\n" + markdown_table(rows))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def load_rows(results: Path) -> list:
    path = results.with_suffix(".json")
    return json.loads(path.read_text()) if path.is_file() else []


def run_one(name: str, seed: int, args) -> dict:
    overrides = RUNS[name] + [f"seed={seed}", f"data.root={args.shared / DATA_FILE}",
                              f"model.checkpoint={args.shared / WEIGHTS_FILE}"] + (QUICK if args.quick else [])
    cfg = load_config(BASE_CONFIG, overrides)
    start = time.time()
    metrics = run_training(cfg, args.runs_dir / f"{name}_seed{seed}")
    if metrics.get("completed_tasks") != cfg.data.num_tasks:
        raise RuntimeError(f"run {name} seed {seed} did not complete all tasks")
    minutes = sum(metrics["task_seconds"]) / 60  # training + evaluation time of all tasks, also across resumes
    print(f"{name} seed {seed}: FA {metrics['FA']:.4f} ({(time.time() - start) / 60:.1f} min in this call)")
    return row_of(name, seed, metrics, minutes)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=sorted(RUNS), default=list(RUNS), help="runs to do (default: all)")
    p.add_argument("--seeds", nargs="+", type=int, default=[42], help="seeds, each run once per seed")
    p.add_argument("--quick", action="store_true", help="2 tasks x 50 classes, 3 train / 2 test images per class, 1 WTP epoch (smoke check)")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="folder with data/ and weights/")
    p.add_argument("--runs-dir", type=Path, default=None, help="run directories (default: runs/bench_cifar100_cpu)")
    p.add_argument("--results", type=Path, default=None,
                   help="table path without suffix (default: bench/results/cifar100_cpu[_quick])")
    args = p.parse_args(argv)
    suffix = "_quick" if args.quick else ""
    args.runs_dir = args.runs_dir or REPO / "runs" / f"bench_cifar100_cpu_authors{suffix}"
    args.results = args.results or REPO / "bench" / "results" / f"cifar100_cpu{suffix}"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    check_shared(args.shared)
    import torch

    header = (f"Split CIFAR-100 (10 x 10, reduced: see configs/bench/cifar100_cpu.yaml){' QUICK' if args.quick else ''}"
              f"; the authors' training semantics (docs/fidelity.md); torch threads {torch.get_num_threads()}; "
              "accuracies in %, averages over tasks; CA/FM_official: every class competes at evaluation and the "
              "forgetting max includes the last column (the authors' reporting).\n")
    rows = load_rows(args.results)
    for seed in args.seeds:
        for name in args.only:
            row = run_one(name, seed, args)
            rows = [r for r in rows if (r["run"], r["seed"]) != (name, seed)] + [row]
            save_rows(rows, args.results, header)
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
