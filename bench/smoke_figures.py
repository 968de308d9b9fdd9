"""The smoke run's figures and timings quoted by README.md and docs/getting-started.md, measured by running it.

    python -m bench.smoke_figures            # run configs/smoke.yaml once, write bench/results/smoke.json
    python -m bench.readme_tables            # then regenerate the blocks that quote it

``bench/results/smoke.json`` holds what the docs quote: FA, CA, FM, TIL FA (fractions), the TII accuracy per
task, the CIL accuracy matrix, the task counts, the line ``norga train`` ends with (the block rebuilds it from the
figures), the training time (seconds, the sum of the
run's ``task_seconds``) and the wall time of the whole command (seconds, imports and plots included), the
machine (CPU model, core count, load average at the start, ``OMP_NUM_THREADS``), the package versions, the
date and the commit. The blocks ``<!-- bench:smoke-figures -->`` are generated from it by
``bench/readme_tables.py`` (``tests/test_readme.py`` fails when a page differs from the committed file) and
``tests/test_smoke_figures.py`` (slow) trains the smoke config and fails when its accuracies differ from the
committed ones. Times are measurements on one machine, stated with it, not promises.

The block ``<!-- bench:cifar100-dinov2-cpu -->`` (docs/results.md) says that no result of
``configs/cifar100_dinov2_cpu.yaml`` is committed and quotes the nearest measured setup, the ``cifar100_first``
regime (``bench/results/cifar100_cpu.json``), for the same gate.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"
RESULT = REPO / "bench" / "results" / "smoke.json"
FIRST_REGIME = REPO / "bench" / "results" / "cifar100_cpu.json"
DINOV2_CPU = REPO / "configs" / "cifar100_dinov2_cpu.yaml"
# deterministic on a CPU: a run of the smoke config must give exactly these (tests/test_smoke_figures.py, slow)
FIGURES = ("FA", "CA", "FM", "til_FA", "tii_accuracy", "acc_matrix", "completed_tasks", "num_tasks")
COMMAND = "norga train --config configs/smoke.yaml --output-dir runs/smoke"


def complete_line(m: dict) -> str:
    """The line ``norga train`` ends with (norga/commands/cli.py), without the path."""
    return (f"run complete: FA {m['FA']:.4f}  CA {m['CA']:.4f}  FM {m['FM']:.4f} "
            f"({m['completed_tasks']} of {m['num_tasks']} tasks)")


def machine() -> dict:
    """Where a time was measured: CPU model, cores, 1-minute load average at the start, torch threads."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
        model = names[0] if names else model
    return {"cpu": model, "cores": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"), "system": platform.system()}


def measure(out_dir: Path) -> dict:
    """Run the smoke config with ``python -m norga train`` into ``out_dir`` and return the smoke.json record."""
    started, where = time.perf_counter(), machine()
    subprocess.run([sys.executable, "-m", "norga", "train", "--config", str(SMOKE), "--output-dir", str(out_dir)],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    m = json.loads((Path(out_dir) / "metrics.json").read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {**{k: m[k] for k in FIGURES}, "complete_line": complete_line(m),
            "training_seconds": round(sum(m["task_seconds"]), 1), "wall_seconds": round(wall, 1),
            "machine": where, "versions": m["versions"], "date": datetime.date.today().isoformat(),
            "commit": commit.stdout.strip(), "command": COMMAND}


def load(path: Optional[Path] = None) -> dict:
    path = RESULT if path is None else path
    return json.loads(path.read_text()) if path.is_file() else {}


def smoke_lines(r: dict) -> List[str]:
    """The README / getting-started block: the end line, the per-task TII, the measured times with the machine."""
    if not r:
        return []
    tii = " / ".join(f"{a:.3f}" for a in r["tii_accuracy"])
    where, v = r["machine"], r["versions"]
    day = datetime.date.fromisoformat(r["date"]).strftime("%-d %B %Y")  # no ASCII minus: readme_tables typesets it
    return [
        f"It ends with `{complete_line(r)}` (TIL FA {r['til_FA']:.4f}; TII accuracy per task {tii}); these",
        "figures are what every CPU run gave so far, and `tests/test_smoke_figures.py` (slow) fails when a run "
        f"differs. Measured on {day} (`python -m bench.smoke_figures`, `bench/results/smoke.json`): "
        f"{r['training_seconds']:.1f} s of training, {r['wall_seconds']:.0f} s for the whole command, on "
        f"{where['cores']} cores of an {where['cpu']} (load {where['load_1min']:.1f} at the start, "
        f"OMP_NUM_THREADS={where['omp_num_threads']}), torch {v['torch']}; times depend on the machine and its load.",
    ]


def dinov2_cpu_lines(rows: List[dict], arm: str = "norga_tanh") -> List[str]:
    """docs/results.md: no committed result of configs/cifar100_dinov2_cpu.yaml; the nearest regime's ``arm``
    (the config's gate) per seed, accuracies in %, minutes as recorded."""
    mine = sorted((r for r in rows if r["run"] == arm), key=lambda r: r["seed"])
    if not mine:
        return []
    per_seed = "; ".join(f"seed {r['seed']}: FA {100 * r['FA']:.2f}, CA {100 * r['CA']:.2f}, TII "
                         f"{100 * r['TII']:.2f}, {r['minutes']:.1f} minutes" for r in mine)
    return [f"No result or run time of `configs/cifar100_dinov2_cpu.yaml` is committed. The nearest measured "
            f"setup is the `cifar100_first` regime's `{arm}` arm (`configs/bench/cifar100_cpu.yaml`: the same "
            f"backbone, gate and 84 px input with 60 / 20 images per class, 3 WTP and 30 TII epochs and the "
            f"authors' CIFAR transforms), from `bench/results/cifar100_cpu.json`: {per_seed}."]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=RESULT, help="where to write the record (default: %(default)s)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        record = measure(Path(tmp) / "smoke")
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}: {record['complete_line']}; {record['training_seconds']} s of training, "
          f"{record['wall_seconds']} s wall; now run python -m bench.readme_tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
