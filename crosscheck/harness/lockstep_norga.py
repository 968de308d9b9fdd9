"""A whole L2P run in lock step, norga's side: ``python -m crosscheck.harness.lockstep_norga --config C --out FILE``.

The 3-step and one-task checks (:mod:`crosscheck.harness.steps_norga`) start both codes from the same tensors on
the same batches; this one does so for a **whole run** (every task, every epoch). norga trains the config's L2P
run as ``norga train`` would (same seeds, loaders and augmentation), but every augmented batch of every epoch is
drawn first and kept, and after each task every test task seen so far is scored over all classes of the head
(the reference's evaluation). FILE holds the backbone, the initial tensors, the batches, the test sets, the
tensors after every task and the accuracy matrix, for ``crosscheck/harness/lockstep_reference.py`` to replay the
run in the reference code. If the two accuracy matrices agree, a gap between the two codes' ordinary runs comes
from their random draws (data order, augmentation, initial values), not from what they compute.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List

import torch

from norga.config import load_config
from norga.engine.evaluate import evaluate_task
from norga.engine.loaders import task_loaders, test_loader
from norga.engine.task_loop import build_data, build_vit, resolve_config
from norga.methods import build_method
from norga.methods.base import TaskLoaders
from norga.toolkit.seeding import seed_everything, task_seed


class EpochBatches:
    """Iterating yields the next epoch's fixed list of batches (the loop asks for the loader once per epoch)."""

    def __init__(self, epochs: List[list]):
        self.epochs, self.next = epochs, 0

    def __iter__(self):
        batches = self.epochs[self.next]
        self.next += 1
        return iter(batches)

    def __len__(self) -> int:
        return len(self.epochs[0])


def trained_tensors(method) -> dict:
    return {"prompts": method.prompts.detach().clone(), "keys": method.keys.detach().clone(),
            "head.weight": method.head.weight.detach().clone(), "head.bias": method.head.bias.detach().clone()}


def load_initial(method, path: Path, class_order: List[int]) -> None:
    """Start from other initial tensors (``path``: prompts (M, L, D), keys (M, D), head.weight (C, D), head.bias (C,)
    with the head's rows indexed by original class id, as the reference's; norga's row p is class class_order[p])."""
    init = torch.load(path, weights_only=False)
    rows = torch.as_tensor(class_order)
    with torch.no_grad():
        method.prompts.copy_(init["prompts"])
        method.keys.copy_(init["keys"])
        method.head.weight.copy_(init["head.weight"][rows])
        method.head.bias.copy_(init["head.bias"][rows])


def lockstep(config: Path, overrides: List[str], initial: Path = None) -> dict:
    cfg = resolve_config(load_config(config, overrides))
    if cfg.method.name != "l2p":
        raise SystemExit(f"error: {config} runs {cfg.method.name!r}; the lock-step check is written for l2p")
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, torch.device("cpu"))
    if initial is not None:
        load_initial(method, initial, list(bench.class_order))
    out = {"backbone": {k: v.float() for k, v in vit.state_dict().items()}, "initial": trained_tensors(method),
           "task_classes": [list(map(int, c)) for c in bench.task_classes],  # head rows (labels) of each task
           "class_order": list(map(int, bench.class_order)),  # head row p is original class class_order[p]
           "batches": [], "tests": [],
           "after_task": [], "acc": [[None] * cfg.data.num_tasks for _ in range(cfg.data.num_tasks)],
           "epochs": cfg.method.epochs, "lr": method.c.lr * (cfg.method.batch_size / 256 if cfg.method.scale_lr_by_batch
                                                             else 1.0)}
    tests = [test_loader(cfg, bench, t) for t in range(cfg.data.num_tasks)]
    out["tests"] = [[(x, torch.as_tensor(y)) for x, y in loader] for loader in tests]
    for t in range(cfg.data.num_tasks):
        loaders = task_loaders(cfg, bench, t, method.train_batch_size, tests[t])
        seed_everything(task_seed(cfg.seed, t))
        epochs = [[(x, torch.as_tensor(y)) for x, y in loaders.train] for _ in range(cfg.method.epochs)]
        out["batches"].append(epochs)
        method.learn_task(t, TaskLoaders(EpochBatches(epochs), None, None))
        out["after_task"].append(trained_tensors(method))
        seen = method.seen_mask(t).cpu()
        for i in range(t + 1):
            ev = evaluate_task(method, i, seen, tests[i], torch.device("cpu"), mask_unseen=False)
            out["acc"][i][t] = ev.cil_unmasked_accuracy
        print(f"task {t}: accuracy on tasks 0..{t} " + " ".join(f"{100 * out['acc'][i][t]:.1f}" for i in range(t + 1)),
              flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, required=True, help="an l2p config of the cross-check task")
    p.add_argument("--set", nargs="*", default=[], help="overrides, e.g. seed=1")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--init", type=Path, default=None,
                   help="initial prompts, keys and head to start from (e.g. the reference's own draws of a seed)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(lockstep(args.config, args.set, args.init), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
