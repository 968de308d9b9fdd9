"""SD-LoRA as a registered method: LoRA components on the queries and values whose directions freeze task by
task while their magnitudes keep learning.

Every adapted block's fused ``qkv`` is wrapped (:class:`~norga.models.lora_qkv.LoRAQKV`, targets q and v).
Task t adds one component per block (A_t Kaiming-uniform, B_t zero, rank ``task_ranks[t]`` or ``rank``) and one
magnitude alpha_t (a scalar shared by every block and by q and v, as in the official code). While the model
holds components 0..t, projection p of a block computes (:func:`component_coefficients`)

    x W_p^T + sum_(i<t) alpha_i * x A_i[p]^T B_i[p]^T / n_i[p] + alpha_t * x A_t[p]^T B_t[p]^T

with n_i[p] = ||B_i[p]||_F ||A_i[p]||_F (``normalise: factors``, official) or ||B_i[p] A_i[p]||_F
(``product``, the paper's normalised direction). During task t, A_t, B_t, every alpha_0..alpha_t and the head
train on task t's cross-entropy (SGD with momentum at a constant lr: the official recipe; ``optimizer: adam``
is the paper's §4.1); the directions of
components 0..t-1 stay fixed. ``magnitudes: reset`` (official) sets every alpha back to ``magnitude_init``
when a task starts; ``carry`` lets them continue. The newest component stays un-normalised in the evaluation
after its task, as in the official code (it is normalised from the next task on).

One linear head over all classes (Kaiming-uniform, linear gain, zero bias: the official SimpleLinear); rows of
earlier tasks get no gradient from a later task's cross-entropy. No task id is inferred.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch
from torch import Tensor, nn

from ..models.lora_qkv import LoRABranch, LoRAQKV, branch_state, load_branches
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from . import register_method
from .base import LoRAMethod, TaskLoaders


def direction_norm(branch: LoRABranch, kind: str) -> Tensor:
    """(P,) the norm dividing each projection's B A: ||B||_F ||A||_F (``factors``) or ||B A||_F (``product``)."""
    if kind == "factors":
        return branch.up.flatten(1).norm(dim=1) * branch.down.flatten(1).norm(dim=1)
    if kind == "product":
        return branch.product().flatten(1).norm(dim=1)
    raise ValueError(f"unknown normalisation {kind!r}; choose factors or product")


def component_coefficients(branches: Sequence[LoRABranch], magnitudes: Sequence[Tensor], kind: str) -> Tensor:
    """(n, P): alpha_i / n_i[p] for every component but the newest, alpha_newest for the newest (un-normalised)."""
    last = len(branches) - 1
    rows = []
    for i, branch in enumerate(branches):
        alpha = magnitudes[i].reshape(())
        projections = branch.up.shape[0]
        rows.append(alpha.expand(projections) if i == last else alpha / direction_norm(branch, kind))
    return torch.stack(rows)


def rank_of(task: int, rank: int, task_ranks) -> int:
    """Rank of task ``task``'s component: ``task_ranks[task]`` (its last value past its end) or ``rank``."""
    if not task_ranks:
        return int(rank)
    return int(task_ranks[min(task, len(task_ranks) - 1)])


@register_method("sd_lora")
class SDLoRA(LoRAMethod):
    """Wrappers by block (``wrappers``), magnitudes (one scalar per task), the head (D -> C)."""

    targets = ("q", "v")

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        for wrapper in self.wrappers.values():
            wrapper.coefficients = self.coefficients
        self.magnitudes = nn.ParameterList()
        nn.init.kaiming_uniform_(self.head.weight, nonlinearity="linear")  # the official SimpleLinear's init
        nn.init.zeros_(self.head.bias)

    def coefficients(self, wrapper: LoRAQKV) -> Tensor:
        return component_coefficients(list(wrapper.branches), list(self.magnitudes), self.c.normalise)

    # ---- training ----------------------------------------------------------
    def start_task(self, task: int) -> List[nn.Parameter]:
        """Freeze the old directions, reset (or keep) the magnitudes, add task ``task``'s component and
        magnitude; returns the parameters task ``task`` trains besides the head."""
        c = self.c
        if c.magnitudes == "reset":
            with torch.no_grad():
                for alpha in self.magnitudes:
                    alpha.fill_(c.magnitude_init)
        rank = rank_of(task, c.rank, c.task_ranks)
        new = []
        for wrapper in self.wrappers.values():
            for branch in wrapper.branches:
                branch.requires_grad_(False)
            new.append(wrapper.add_branch(rank))
        self.magnitudes.append(nn.Parameter(torch.tensor(float(c.magnitude_init), device=self.device)))
        return [p for branch in new for p in branch.parameters()] + list(self.magnitudes)

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c, model, head = self.c, self.model, self.head
        params = self.start_task(task) + list(head.parameters())
        self.hooks.notify("task_started", self, task)  # a declared hook point (hooks.py)
        optimizer = make_optimizer(c.optimizer, params, c.lr, c.weight_decay, c.momentum)
        model.eval()  # the frozen backbone has no dropout; eval keeps it deterministic

        def forward(batch):
            x, y = batch
            return {"logits": head(model(x.to(self.device))), "labels": y.to(self.device)}

        run_stage(Stage("sd_lora", task, c.epochs, optimizer, epoch_scheduler(optimizer, "constant", c.epochs),
                        clip=c.grad_clip, clip_params=params, train_modules=[head], lr_key=self.config_key("lr"),
                        describe=lambda: {"magnitudes": [round(float(a.detach()), 4) for a in self.magnitudes]}),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task))})
        head.eval()

    # ---- state ---------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"branches": branch_state(self.wrappers),
                "magnitudes": torch.stack([a.detach().cpu() for a in self.magnitudes]),
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        load_branches(self.wrappers, state["branches"])
        self.magnitudes = nn.ParameterList([nn.Parameter(a.clone().to(self.device)) for a in state["magnitudes"]])
        self.head.load_state_dict(state["head"])

    def describe(self) -> Dict[str, Any]:
        c = self.c
        first = next(iter(self.wrappers.values()))
        return {"name": self.name, "lora_layers": self.layers, "ranks": [b.rank for b in first.branches],
                "magnitudes": [float(a.detach()) for a in self.magnitudes], "normalise": c.normalise,
                "magnitude_mode": c.magnitudes, "optimizer": c.optimizer}

    def summary(self) -> str:
        c = self.c
        ranks = f"ranks {list(c.task_ranks)}" if c.task_ranks else f"rank {c.rank}"
        return (f"method: sd_lora (a LoRA component per task on q, v of blocks {self.layers}, {ranks}; old "
                f"directions frozen, magnitudes trained ({c.magnitudes}), norm {c.normalise})")
