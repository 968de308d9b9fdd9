"""TUNA's first task in lock step, norga's side (the TUNA whole-run finding of docs/crosscheck.md):

    python -m crosscheck.tuna.task0_norga --config configs/crosscheck/tuna.yaml --set seed=1997 --out FILE

Task 0 of the run the config describes, as ``norga train`` starts it (the seed's initial adapter and head, its
augmented training batches, every epoch's batches drawn first and kept), with adapter dropout 0 (the one random
draw inside a step, which the two codes cannot share). FILE holds the converted backbone, the initial tensors, the
batches, and after every optimiser step the head and every block's adapter: ``tuna_task0_reference.py`` replays the
same steps in the authors' code and reports where the two trajectories part.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, List

import torch

from crosscheck.harness.lockstep_norga import EpochBatches
from crosscheck.tuna.norga_side import adapter_state
from norga.config import load_config
from norga.engine.loaders import task_loaders
from norga.engine.task_loop import build_data, build_vit, resolve_config
from norga.methods import build_method
from norga.toolkit.seeding import seed_everything, task_seed


class RecordedEpochs(EpochBatches):
    """:class:`~crosscheck.harness.lockstep_norga.EpochBatches` that, after each batch's optimiser step (when the loop
    asks for the next batch), appends ``snapshot()`` to ``trace``."""

    def __init__(self, epochs: List[list], snapshot: Callable[[], dict]):
        super().__init__(epochs)
        self.snapshot, self.trace = snapshot, []

    def __iter__(self):
        for batch in super().__iter__():
            yield batch
            self.trace.append(self.snapshot())


def first_task(config: Path, overrides: List[str]) -> dict:
    cfg = resolve_config(load_config(config, [*overrides, "method.adapter_dropout=0"]))
    if cfg.method.name != "tuna":
        raise SystemExit(f"error: {config} runs {cfg.method.name!r}; this lock-step check is written for tuna")
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, torch.device("cpu"))
    backbone = {k: v.float().clone() for k, v in vit.state_dict().items() if ".tuned." not in k}
    loaders = task_loaders(cfg, bench, 0, method.train_batch_size)
    seed_everything(task_seed(cfg.seed, 0))
    new = method.add_adapter()  # learn_task's first steps for task 0: its adapter (slot 1) and head
    method.add_head(0)
    initial = {"adapter": adapter_state(method, 1), "head": method.heads[0].detach().clone()}
    epochs = [[(x, torch.as_tensor(y)) for x, y in loaders.train] for _ in range(cfg.method.epochs)]
    recorded = RecordedEpochs(epochs, lambda: {"adapter": adapter_state(method, 1),
                                               "head": method.heads[0].detach().clone()})
    method.train_adapter(0, new, recorded)
    return {"backbone": backbone, "initial": initial, "task_classes": list(map(int, bench.task_classes[0])),
            "batches": epochs, "trace": recorded.trace, "seed": cfg.seed}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="a tuna config of the cross-check task")
    p.add_argument("--set", nargs="*", default=[], help="overrides, e.g. seed=1997")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = first_task(args.config, args.set)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, args.out)
    print(f"wrote {args.out}: {len(out['trace'])} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
