"""TUNA's first task in lock step, the authors' side (reference environment, timm 0.6.13 first on the path):

    python -m crosscheck.tuna.task0_reference --ref CHECKOUT --saved FILE

CHECKOUT is the TUNA authors' code (the fork Ngahoang2005/ICCV2025-TUNA at 77d4f10), FILE what ``python -m
crosscheck.tuna.task0_norga`` wrote. Its ``Learner`` is built by its own ``__init__`` as in
``tuna_reference_run.py`` (the ViT-S/14 at 56 px with FILE's converted backbone), its head drawn by its
``update_fc``, then its ``cur_adapter`` and head are set to FILE's initial tensors (adapter dropout 0, as norga's
side) and its own ``get_optimizer``, ``get_scheduler`` and ``_init_train`` train task 0 on FILE's batches, epoch by
epoch. Printed per epoch: the largest |reference − norga| of the head and of the adapters after its last step,
beside how far norga's moved from the initial tensors.
"""
from __future__ import annotations

import logging

import torch

from crosscheck.harness.reference_cli import reference_args
from crosscheck.tuna.first_task_init import adapter_tensors
from crosscheck.tuna.reference_run import REFERENCE_NAMES, make_learner
from crosscheck.tuna.reference_side import set_adapters


class ReplayedEpochs:
    """Iterating yields the next epoch's batches as its loaders do: (index, images, task-local labels)."""

    def __init__(self, epochs, position, snapshot):
        self.epochs, self.position, self.snapshot, self.trace, self.next = epochs, position, snapshot, [], 0

    def __iter__(self):
        batches = self.epochs[self.next]
        self.next += 1
        for x, y in batches:
            yield torch.arange(len(y)), x, self.position[y]
            self.trace.append(self.snapshot())

    def __len__(self):
        return len(self.epochs[0])


def gap(a: dict, b: dict) -> tuple:
    """Largest |a − b| of the head and of the adapters' tensors."""
    adapter = max(float((a["adapter"][k][n] - b["adapter"][k][n]).abs().max()) for k in range(len(a["adapter"]))
                  for n in a["adapter"][k])
    return float((a["head"] - b["head"]).abs().max()), adapter


def main(argv=None) -> int:
    args = reference_args(__doc__, "Ngahoang2005/ICCV2025-TUNA @ 77d4f10", "crosscheck.tuna.task0_norga", argv)
    logging.disable(logging.INFO)
    saved = torch.load(args.saved, weights_only=False)
    learner = make_learner(saved["backbone"])
    net = learner._network
    learner._cur_task, learner._known_classes, learner._total_classes = 0, 0, len(saved["task_classes"])
    net.update_fc(len(saved["task_classes"]))
    set_adapters(net.backbone.cur_adapter, saved["initial"]["adapter"])
    head = net.fc.heads[0][0].weight
    with torch.no_grad():
        head.copy_(saved["initial"]["head"])
    position = torch.full((max(saved["task_classes"]) + 1,), -1, dtype=torch.long)
    position[torch.as_tensor(saved["task_classes"])] = torch.arange(len(saved["task_classes"]))

    def snapshot():
        return {"head": head.detach().clone(), "adapter": adapter_tensors(REFERENCE_NAMES, net.backbone.cur_adapter)}

    replay = ReplayedEpochs(saved["batches"], position, snapshot)
    optimizer = learner.get_optimizer(net.backbone)
    learner._init_train(replay, None, optimizer, learner.get_scheduler(optimizer))
    steps = len(saved["batches"][0])
    print(f"seed {saved['seed']}: {len(replay.trace)} steps (norga {len(saved['trace'])})")
    print("epoch | max |ref - norga| head | adapters | norga moved: head | adapters")
    for e in range(len(saved["batches"])):
        i = (e + 1) * steps - 1
        (head, adapters), moved = gap(replay.trace[i], saved["trace"][i]), gap(saved["trace"][i], saved["initial"])
        print(f"{e + 1} | {head:.1e} | {adapters:.1e} | {moved[0]:.1e} | {moved[1]:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
