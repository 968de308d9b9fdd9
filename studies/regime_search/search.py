"""How the evidence regime was found: TIL gain of a trained prompt over a frozen-feature probe vs WTP budget.

    python -m studies.regime_search.search            # the fixed grid below, ~16 min on 2 cores; resumes
    python -m studies.regime_search.search --quick    # one tiny point (smoke check)
    python -m studies.regime_search.search --check    # exit 1 when the committed .md is not the rows'

One task of one domain of the mixed-domain data (bench/mixed_domains.py), seed 0 (the
evidence benchmark uses seeds 1-5), the **linear gate only** (HiDe-Prompt), so the
comparison of gates is never tuned here. For each domain x train transform x WTP epochs
in ``GRID`` it trains one task with configs/bench/evidence_cpu.yaml and reads the
run's diagnostics (norga/methods/hideprompt_diagnostics.py): ``gain`` = TIL accuracy
of ψ on prompted features right after WTP minus a linear probe trained on frozen
features with WTP's own head recipe (same epochs, lr, batch), on the task's test images.
The two transforms differ only in augmentation: ``backbone`` trains WTP on
RandomResizedCrop(0.08-1) + flip, ``plain`` on the un-augmented images; both normalise
with the backbone's mean/std and share the test transform (the probe always sees clean
cached features, as the ``no_prompt`` arm does).
Rows go to studies/regime_search/regime_search.md / .json as each point finishes.

Decision rule, written before the grid ran: the evidence benchmark uses the cheapest
(transforms, WTP epochs) point whose gain is at least 3 points on both domains; if there
is none, the benchmark runs the largest budget that fits 10 minutes per arm-run and the
README shows this grid as the reason prompts cannot be shown to help.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench import mixed_domains
from bench.regime_data import WEIGHTS_FILE, check_weights
from bench.row_merge import load_rows, result_file, save_rows
from norga.config import load_config
from norga.files import atomic_write_bytes
from studies.generated import write_or_check

REPO = Path(__file__).resolve().parents[2]

CONFIG = REPO / "configs" / "bench" / "evidence_cpu.yaml"
GRID = {"domain": ["cifar100_a", "fashion_mnist"], "transforms": ["backbone", "plain"], "wtp_epochs": [3, 10, 20]}
QUICK = {"domain": ["cifar100_a"], "transforms": ["plain"], "wtp_epochs": [1]}
SEED = 0


def domain_npz(mixed: Path, domain: str, out: Path) -> Path:
    """The classes of one domain of the mixed .npz as a plain 10-class array file (labels 0-9)."""
    if out.is_file() and out.stat().st_mtime >= mixed.stat().st_mtime:
        return out
    with np.load(mixed) as f:
        t = [str(n) for n in f["task_names"]].index(domain)
        row = f["task_groups"][t]
        arrays = {}
        for split in ("train", "test"):
            x, y = f[f"{split}_x"], f[f"{split}_y"]
            keep = np.isin(y, row)
            arrays[f"{split}_x"], arrays[f"{split}_y"] = x[keep], np.searchsorted(np.sort(row), y[keep])
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, out)
    return out


def run_point(domain: str, transforms: str, epochs: int, args) -> dict:
    from norga.engine import run_training

    root = domain_npz(args.mixed, domain, args.data_dir / f"search_{domain}.npz")
    overrides = [f"data.root={root}", "data.num_tasks=1", "data.classes_per_task=10", f"seed={SEED}",
                 f"data.transforms={transforms}", f"method.wtp.epochs={epochs}", "method.gate={name: linear}",
                 f"model.checkpoint={args.shared / WEIGHTS_FILE}"] + (["data.train_per_class=10"] if args.quick else [])
    cfg = load_config(CONFIG, overrides)
    start = time.time()
    metrics = run_training(cfg, args.runs_dir / f"{domain}_{transforms}_e{epochs}")
    d = metrics["method"]["diagnostics"][0]
    steps = epochs * -(-cfg.data.train_per_class * 10 // cfg.method.wtp.batch_size)
    row = {"domain": domain, "transforms": transforms, "wtp_epochs": epochs, "wtp_steps": steps,
           "probe": d["til_frozen_probe"], "prompted": d["til_prompted_before_tap"],
           "gain": d["til_prompted_before_tap"] - d["til_frozen_probe"],
           "feat_trained": d["feature_change_trained"], "feat_random": d["feature_change_random"],
           "prompt_change": d["prompt_change"], "minutes": sum(metrics["task_seconds"]) / 60}
    print(f"{domain} {transforms} e{epochs}: gain {100 * row['gain']:+.1f} ({(time.time() - start) / 60:.1f} min)",
          flush=True)
    return row


def report_text(rows: list) -> str:
    """The report (Markdown table) of the search's rows."""
    cols = ("domain", "transforms", "wtp_epochs", "wtp_steps", "probe", "prompted", "gain", "feat_trained",
            "feat_random", "prompt_change", "minutes")
    lines = ["One task, seed 0, linear gate; probe / prompted = TIL accuracy (%) of a linear probe on frozen features "
             "/ of ψ on prompted features after WTP; gain in points; feat_* = relative feature change by the trained "
             "/ a random prompt of the same norm; prompt_change = ‖e − e⁰‖/‖e⁰‖.", "",
             "| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for r in rows:
        cells = [f"{100 * r[c]:.1f}" if c in ("probe", "prompted") else f"{100 * r[c]:+.1f}" if c == "gain"
                 else f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def save(rows: list, stem: Path) -> None:
    save_rows(stem, rows)
    atomic_write_bytes(result_file(stem, ".md"), report_text(rows).encode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--check", action="store_true", help="only check that the committed .md is the rows' (exit 1)")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--fashion-dir", type=Path, default=mixed_domains.FASHION_DIR)
    p.add_argument("--data-dir", type=Path, default=REPO / "runs" / "bench_data")
    args = p.parse_args(argv)
    suffix = "_quick" if args.quick else ""
    stem = REPO / "studies" / "regime_search" / f"regime_search{suffix}"
    if args.check:
        return write_or_check(result_file(stem, ".md"), report_text(load_rows(stem)), True)
    check_weights(args.shared)
    args.mixed = mixed_domains.build(args.shared, args.fashion_dir, args.data_dir / "mixed_domains.npz")
    args.runs_dir = REPO / "runs" / f"bench_regime_search{suffix}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    grid = QUICK if args.quick else GRID
    rows = load_rows(stem)
    for domain in grid["domain"]:
        for transforms in grid["transforms"]:
            for epochs in grid["wtp_epochs"]:
                key = (domain, transforms, epochs)
                rows = [r for r in rows if (r["domain"], r["transforms"], r["wtp_epochs"]) != key]
                rows.append(run_point(domain, transforms, epochs, args))
                save(rows, stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
