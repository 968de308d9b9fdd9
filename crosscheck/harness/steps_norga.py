"""norga's side of the training-step cross-check: ``python -m crosscheck.harness.steps_norga --out DIR``.

From norga's own initial state, each method trains one epoch of three fixed batches of 20 real CIFAR-100 training
images (classes 0-9, no augmentation, task 0, Adam at lr 0.0025, gradient clip 1.0). DIR/steps_<method>.pt holds
the images, the labels, the initial and the trained tensors, for ``crosscheck/harness/steps_reference.py`` to start
the reference from the same state, train it on the same batches and compare. Methods, in the NoRGa authors'
settings: ``l2p`` (pool 30, top-5, length 5, class-token head, no prompt position embedding), ``dualprompt``
(G length 5 on blocks 0-1, E length 20 on blocks 2-4) and ``sprompt_authors`` (their "S-Prompt": E length 20
on blocks 0-4, no G-prompt). Every random draw of a step (the batches, their order, augmentation) is removed,
so the two sides must agree to float precision if their losses, masks, clipping and optimiser agree.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

from crosscheck.harness.norga_cli import norga_args, weights_in
from crosscheck.harness.norga_inputs import at_56px, method_of
from norga.methods.base import TaskLoaders

SETTINGS: Dict[str, tuple] = {
    "l2p": ("cifar100_l2p.yaml", ["method.prompt_pos_embed=none", "method.head_pool=token", "method.pool_size=30",
                                  "method.top_k=5", "method.prompt_length=5", "method.pull_coeff=0.1"]),
    "dualprompt": ("cifar100_dualprompt.yaml", ["method.e_prompt_length=20", "method.pull_coeff=1.0"]),
    "sprompt_authors": ("cifar100_dualprompt.yaml", ["method.e_prompt_length=20", "method.g_prompt_length=0",
                                                     "method.g_prompt_layers=[]", "method.e_prompt_layers=[0,1,2,3,4]",
                                                     "method.pull_coeff=1.0"]),
}
STEP = ["method.epochs=1", "method.batch_size=20", "method.lr=0.0025", "method.scale_lr_by_batch=false",
        "method.grad_clip=1.0", "method.head_init=trunc_normal"]


def step_batches(shared: Path, per_class: int = 6, task: int = 0) -> tuple:
    """``per_class`` training images of each class of ``task`` (classes 10 task .. 10 task + 9; 60 images by
    default), bicubic to 56 px, ImageNet mean/std: (10 per_class, 3, 56, 56), labels (10 per_class,)."""
    data = np.load(shared / "data" / "cifar100.npz")
    pick = np.concatenate([np.where(data["train_y"] == c)[0][:per_class] for c in range(10 * task, 10 * task + 10)])
    pick = pick[np.random.RandomState(0).permutation(len(pick))]  # mixed classes in every batch
    return at_56px(data["train_x"][pick]), torch.tensor(data["train_y"][pick], dtype=torch.long)


def tensors(state: dict) -> Dict[str, torch.Tensor]:
    """The trainable tensors of a method's state_dict (head weights flattened to head.weight / head.bias)."""
    out = {k: v.detach().clone() for k, v in state.items() if torch.is_tensor(v)}
    out.update({f"head.{k}": v.detach().clone() for k, v in state["head"].items()})
    return out


def train_steps(name: str, weights: Path, x: torch.Tensor, y: torch.Tensor, epochs: int = 1, task: int = 0) -> dict:
    """``epochs`` passes over the fixed batches of 20 (x, y) in order as task ``task``, from norga's initial
    tensors."""
    config, overrides = SETTINGS[name]
    vit, method = method_of(config, overrides + STEP + [f"method.epochs={epochs}"], weights)
    initial = tensors(method.state_dict(0))
    batches: List[tuple] = [(x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)]
    method.learn_task(task, TaskLoaders(batches, None, None))
    return {"backbone": {k: v.float() for k, v in vit.state_dict().items()}, "images": x, "labels": y,
            "initial": initial, "epochs": epochs, "task": task, "trained": tensors(method.state_dict(task)),
            "layers": {"g": getattr(method, "g_layers", []), "e": getattr(method, "e_layers", [])}}


def options(p) -> None:
    p.add_argument("--only", nargs="+", choices=sorted(SETTINGS), default=sorted(SETTINGS))
    p.add_argument("--per-class", type=int, default=6, help="training images per class 0-9 (batches of 20)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the batches")
    p.add_argument("--task", type=int, default=0, choices=range(5), help="train as this task (its classes)")


def main(argv=None) -> int:
    args = norga_args(__doc__, argv, options)
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    x, y = step_batches(args.shared, args.per_class, args.task)
    for name in args.only:
        saved = train_steps(name, weights_in(args.shared), x, y, args.epochs, args.task)
        torch.save(saved, args.out / f"steps_{name}.pt")
        print(f"wrote {args.out / f'steps_{name}.pt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
