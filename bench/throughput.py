"""Throughput of a config's backbone on this machine: images/s of the prompt-training step, frozen feature
extraction and prompted evaluation, peak memory per batch size, and the per-stage seconds of one task.

    python -m bench.throughput                                        # smoke config, CPU, amp off and bf16
    python -m bench.throughput --config configs/cifar100_norga.yaml --device cuda --amp off bf16 fp16 \\
        --batch 32 128 --steps 10                                     # a GPU user's run (needs the weights)
    python -m bench.throughput --task                                 # + per-stage seconds of task 0
    python -m bench.throughput --compile default --amp off            # the backbone through torch.compile

Rows (one per amp mode and batch size), on random images of the config's input size:

* ``train img/s`` — the prompt-training step of prefix methods (HiDe-Prompt's WTP): forward with a
  different prefix per sample on ``method.prompt_layers`` (length ``method.prompt_length``, gate
  ``method.gate``; methods without them: blocks 0-4, length 5, the NoRGa gate), backward to the
  prompts and gates, one Adam step;
* ``frozen img/s`` — frozen feature extraction (no prompts, no gradients);
* ``eval img/s`` — the prompted forward without gradients (evaluation);
* ``peak MiB`` — of the training step: ``torch.cuda.max_memory_allocated`` on CUDA; on the CPU the peak of
  live tensor bytes replayed from the profiler's allocation events;
* ``x off`` — train img/s relative to ``amp: off`` at the same batch, measured in the same process.

``--task`` trains task 0 of the config with its own method and loaders and reports wall-clock seconds
per stage from the epoch log (the time between consecutive epoch-log lines, given to the later line's
stage, so the feature extraction before a stage counts towards it). Results: a table on stdout and
``--json`` (default ``bench/results/throughput_<device>.json``). Times are medians over ``--steps``
steps after one warm-up step (with ``--compile`` the warm-up step also compiles, so compile time is not counted).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

from bench.attention import peak_bytes  # the profiler replay of bench/attention.py
from norga.config import load_config
from norga.models import PromptedViT, PromptPool
from norga.reproduce.estimate import backbone_passes, median_seconds  # the passes the estimates time
from norga.toolkit.devices import resolve_device

REPO = Path(__file__).resolve().parents[1]
from norga.models.compilation import compile_mode  # noqa: E402
from norga.models.precision import amp_mode  # noqa: E402

DEFAULT_PREFIX = {"prompt_layers": [0, 1, 2, 3, 4], "prompt_length": 5, "gate": {"name": "norga"}}


def prefix_settings(cfg) -> dict:
    """The prefix the training step uses: the method's own, or :data:`DEFAULT_PREFIX`."""
    m = cfg.method
    return {key: getattr(m, key, default) for key, default in DEFAULT_PREFIX.items()}


def build_model(cfg, device: torch.device):
    """(PromptedViT with the config's gate on the prefix blocks, per-task prompt pool, image size)."""
    from norga.engine.task_loop import build_vit

    vit = build_vit(cfg)
    prefix = prefix_settings(cfg)
    depth = len(vit.blocks)
    layers = [i for i in prefix["prompt_layers"] if i < depth] or [0]
    spec = dict(prefix["gate"])  # PromptedViT checks the name and options
    model = PromptedViT(vit, prompt_layers=layers, gate=spec.pop("name"), **spec)
    model.freeze_backbone()
    pool = PromptPool(4, len(layers), max(int(prefix["prompt_length"]), 1), model.num_heads, model.head_dim)
    size = cfg.data.image_size or vit.patch_embed.img_size[0]
    return model.to(device).eval(), pool.to(device), size


def measure(model, pool, size: int, batch: int, steps: int, device: torch.device) -> Dict[str, float]:
    """One row: images/s of the three passes and the training step's peak memory (MiB)."""
    x = torch.randn(batch, 3, size, size, device=device)
    ids = torch.arange(batch) % pool.num_tasks
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    passes = backbone_passes(model, pool, x, ids)
    train_step = passes["train"]
    row = {f"{name}_img_s": batch / median_seconds(fn, steps, sync) for name, fn in passes.items()}
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        train_step()
        sync()
        row["peak_mib"] = torch.cuda.max_memory_allocated(device) / 2 ** 20
    else:
        row["peak_mib"] = peak_bytes(train_step) / 2 ** 20
    return row


def stage_seconds(cfg) -> Dict[str, float]:
    """Wall-clock seconds per stage of task 0 of ``cfg``'s method, from its epoch log."""
    from norga.toolkit.epochlog import epoch_log
    from norga.engine.task_loop import build_data, build_vit, resolve_config, task_loaders
    from norga.methods import build_method

    cfg = resolve_config(cfg)
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, resolve_device(cfg.device))
    with tempfile.TemporaryDirectory() as tmp, amp_mode(cfg.amp), compile_mode(cfg.compile):
        start = time.time()
        with epoch_log(Path(tmp)):
            method.learn_task(0, task_loaders(cfg, bench, 0, method.train_batch_size))
        lines = [json.loads(line) for line in (Path(tmp) / "epochs.jsonl").read_text().splitlines()]
    seconds: Dict[str, float] = {}
    previous = start
    for line in lines:
        seconds[line["stage"]] = seconds.get(line["stage"], 0.0) + line["time"] - previous
        previous = line["time"]
    return {stage: round(value, 2) for stage, value in seconds.items()}


def print_table(rows: List[dict]) -> None:
    print("| amp | batch | train img/s | frozen img/s | eval img/s | peak MiB | x off |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['amp']} | {r['batch']} | {r['train_img_s']:.2f} | {r['frozen_img_s']:.2f} | "
              f"{r['eval_img_s']:.2f} | {r['peak_mib']:.0f} | {r['vs_off']} |")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "smoke.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:K")
    p.add_argument("--amp", nargs="+", default=["off", "bf16"], choices=["off", "bf16", "fp16"])
    p.add_argument("--compile", default="off", choices=["off", "default", "reduce-overhead", "max-autotune"],
                   help="torch.compile mode of the backbone for every row (compilation happens in the warm-up step)")
    p.add_argument("--batch", nargs="+", type=int, default=[8, 32])
    p.add_argument("--steps", type=int, default=5, help="timed steps per measurement (median)")
    p.add_argument("--task", action="store_true", help="also time the stages of task 0 with the config's method")
    p.add_argument("--json", type=Path, default=None, help="default: bench/results/throughput_<device>.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set + [f"device={args.device}"])
    device = resolve_device(cfg.device)
    model, pool, size = build_model(cfg, device)
    rows = []
    for batch in args.batch:
        reference = None
        for mode in args.amp:
            with amp_mode(mode), compile_mode(args.compile):
                row = {"amp": mode, "batch": batch, **measure(model, pool, size, batch, args.steps, device)}
            reference = row["train_img_s"] if mode == "off" else reference
            row["vs_off"] = round(row["train_img_s"] / reference, 3) if reference else None
            rows.append(row)
    result = {"config": str(args.config), "overrides": args.set, "device": str(device), "image_size": size,
              "prefix": prefix_settings(cfg), "torch": torch.__version__, "machine": platform.processor() or
              platform.machine(), "threads": torch.get_num_threads(), "steps": args.steps, "compile": args.compile,
              "rows": rows}
    print_table(rows)
    if args.task:
        result["stage_seconds"] = {mode: stage_seconds(load_config(args.config, args.set + [
            f"device={args.device}", f"amp={mode}", f"compile={args.compile}"])) for mode in args.amp}
        print("stage seconds of task 0:", json.dumps(result["stage_seconds"]))
    out = args.json or REPO / "bench" / "results" / f"throughput_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
