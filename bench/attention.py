"""Cost of prefix attention on a ViT-B/16 (random weights), CPU, one process.

    python -m bench.attention [--batch 8 32] [--repeats 5] [--threads 2]

One "step" = forward + backward. Rows:

* ``timm (no prompts)`` — timm's own model; backward to the input image, so
  the gradient flows through all blocks exactly like the prompted rows;
* ``fast linear`` / ``fast norga-tanh`` — PromptedViT, SDPA path, backward to
  the prompts (5-token prefixes on blocks 0-4, a different prompt per sample);
* ``explicit norga-tanh`` — the reference formula with the full score matrix.

Peak memory is the peak of live CPU tensor bytes during one step, replayed
from the PyTorch profiler's allocation events (not RSS, which is noisy).
Times are medians over ``--repeats`` steps after one warm-up.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import timm
import torch

from norga.models import PromptedViT, PromptPool


def peak_bytes(step) -> int:
    """Peak live CPU tensor bytes allocated during ``step()`` (profiler replay)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(
        (e for e in prof.events() if e.cpu_memory_usage != 0), key=lambda e: e.time_range.start
    )
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage
        peak = max(peak, live)
    return peak


def median_seconds(step, repeats: int) -> float:
    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_steps(batch: int, prefix_len: int):
    torch.manual_seed(0)
    vit = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0)
    vit.requires_grad_(False)  # frozen backbone in every row
    x = torch.randn(batch, 3, 224, 224)

    def plain_step():
        xi = x.clone().requires_grad_(True)
        vit(xi).sum().backward()

    steps = {"timm (no prompts)": plain_step}
    for name, gate, path, opts in (
        ("fast linear", "linear", "fast", {}),
        ("fast norga-tanh", "norga", "fast", {"activation": "tanh"}),
        ("explicit norga-tanh", "norga", "explicit", {"activation": "tanh"}),
    ):
        model = PromptedViT(copy.deepcopy(vit), gate=gate, path=path, **opts)
        model.freeze_backbone()
        pool = PromptPool(batch, len(model.prompt_layers), prefix_len, model.num_heads, model.head_dim)
        task_ids = torch.arange(batch)

        def step(model=model, pool=pool, task_ids=task_ids):
            model(x, pool.gather(task_ids)).sum().backward()

        steps[name] = step
    return steps


def run(batch: int, repeats: int, prefix_len: int) -> list:
    rows = []
    for name, step in make_steps(batch, prefix_len).items():
        rows.append((name, median_seconds(step, repeats), peak_bytes(step)))
    return rows


def print_table(batch: int, rows: list) -> None:
    base_t, base_m = rows[0][1], rows[0][2]
    ref = dict((r[0], r) for r in rows)["explicit norga-tanh"]
    print(f"\nbatch {batch}, ViT-B/16 224 px, prefix length 5 on blocks 0-4, threads {torch.get_num_threads()}")
    print("| run | step time (s) | peak memory (MiB) | time / timm | time / explicit | memory / explicit |")
    print("|---|---|---|---|---|---|")
    for name, t, m in rows:
        print(
            f"| {name} | {t:.3f} | {m / 2**20:.0f} | {t / base_t:.3f} | {t / ref[1]:.3f} | {m / ref[2]:.3f} |"
        )
    del base_m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prefix-length", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, timm {timm.__version__}")
    for batch in args.batch:
        print_table(batch, run(batch, args.repeats, args.prefix_length))


if __name__ == "__main__":
    main()
