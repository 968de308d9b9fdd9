"""InfLoRA as a registered method: interference-free LoRA branches on the keys and values of a frozen ViT.

Every adapted block's fused ``qkv`` is wrapped (:class:`~norga.models.lora_qkv.LoRAQKV`, targets k and v).
Task t adds one branch per block, of rank r, the same down-projection A_t (r, D) on k and v:

1. before training, the inputs of the block's qkv over task t's training images give the representation
   matrix H_t H_t^T / n (D, D), the mean of x x^T over every token (:meth:`InfLoRA.representations`);
   its part inside the stored old-task subspace M is removed, (I - M M^T) H H^T / n, and A_t is the top-r
   left singular vectors of the rest (``design: covariance``, the official code; ``inputs``: of (I - M M^T) H,
   the paper), times ``down_scale`` (:func:`design_down`). A_t is then fixed;
2. B_t (zero at the start) and the head train on task t's cross-entropy (older branches frozen);
3. after training, the representation matrix of the trained model updates the memory by the DualGPM rule
   with the threshold eps_t (:func:`first_memory`, :func:`grow_memory`, :func:`settle_memory`); the memory
   holds either a basis of the old subspace (``remove``) or of its complement (``retain``, once the old
   subspace fills more than half of the D dimensions), as the official code does.

The head is one linear layer over all classes whose rows of task t train only on task t (the official
per-task classifier slices). Prediction: the head on the features of the model with every branch summed;
no task id is inferred.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from ..models.lora_qkv import LoRABranch, branch_state, load_branches
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.devices import to_device
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from . import register_method
from .base import LoRAMethod, TaskLoaders

Memory = Tuple[Tensor, str]  # (basis (D, k) with orthonormal columns, "remove" | "retain")


def threshold_at(task: int, num_tasks: int, start: float, end: float) -> float:
    """The memory's energy threshold after task ``task``: (end - start) * task / num_tasks + start."""
    return (end - start) * task / num_tasks + start


def design_down(cov: Tensor, memory: Optional[Memory], rank: int, form: str = "covariance") -> Tensor:
    """Representation matrix R = H H^T / n (D, D) and the memory -> the down-projection (rank, D): the top-``rank``
    left singular vectors of the representation without its part in the old subspace, P R with P = I - M M^T
    (``remove``) or M M^T (``retain``).

    ``form``: ``covariance`` takes them of P R (the official code); ``inputs`` of the projected inputs P H (the
    paper), computed as those of P R P = (P H)(P H)^T / n, which has the same left singular vectors as P H. The
    two agree without memory (task 0) and differ from task 1 on."""
    if memory is not None:
        basis, kind = memory

        def project(m: Tensor) -> Tensor:
            inside = basis @ (basis.T @ m)
            return m - inside if kind == "remove" else inside

        cov = project(cov)
        if form == "inputs":
            cov = project(cov.T)  # P R P, R and P symmetric
        elif form != "covariance":
            raise ValueError(f"unknown design form {form!r}; choose covariance or inputs")
    u = torch.linalg.svd(cov, full_matrices=False)[0]
    return u[:, :rank].T


def first_memory(activation: Tensor, threshold: float) -> Memory:
    """The memory after the first task: the fewest leading left singular vectors of ``activation`` (D, D) whose
    squared singular values reach ``threshold`` of the total, at least one; kept as the complement when they
    are at least half of D."""
    u, s, _ = torch.linalg.svd(activation, full_matrices=False)
    ratio = s.pow(2) / s.pow(2).sum()
    r = max(int((ratio.cumsum(0) < threshold).sum()), 1)
    if r < activation.shape[0] / 2:
        return u[:, :r], "remove"
    return u[:, r:], "retain"


def _added_directions(ratios: Tensor, accumulated: float, threshold: float) -> int:
    """``remove`` memory: how many new directions (energy ratios in order) reach ``threshold`` from ``accumulated``."""
    r = 0
    for value in ratios.tolist():
        if accumulated >= threshold:
            break
        accumulated += value
        r += 1
    return r


def _removed_directions(ratios: Tensor, accumulated: float, threshold: float) -> int:
    """``retain`` memory: how many complement directions leave until the energy left there is below 1 - threshold."""
    r = 0
    for value in ratios.tolist():
        if accumulated < 1.0 - threshold:
            break
        accumulated -= value
        r += 1
    return r


def grow_memory(memory: Memory, activation: Tensor, threshold: float) -> Memory:
    """One DualGPM update of a memory with a new task's representation matrix ``activation`` (D, D)."""
    basis, kind = memory
    total = activation.pow(2).sum()  # the sum of squared singular values: the squared Frobenius norm
    inside = basis @ (basis.T @ activation)
    if kind == "remove":  # add the new directions needed to reach the threshold of the total energy
        u, s, _ = torch.linalg.svd(activation - inside, full_matrices=False)
        ratios = s.pow(2) / total
        r = _added_directions(ratios, float((total - s.pow(2).sum()) / total), threshold)
        if r == 0:
            return memory
        return torch.cat([basis, u[:, :r]], dim=1)[:, :basis.shape[0]], kind
    u, s, _ = torch.linalg.svd(inside, full_matrices=False)  # retain: basis spans the complement
    ratios = s.pow(2) / total
    r = _removed_directions(ratios, float(s.pow(2).sum() / total), threshold)
    if r == 0:
        return memory
    rest = basis - u[:, :r] @ (u[:, :r].T @ basis)
    return torch.linalg.svd(rest, full_matrices=True)[0][:, :basis.shape[1] - r], kind


def settle_memory(memory: Memory) -> Memory:
    """Switch a ``remove`` memory of more than D / 2 directions to the basis of its complement (``retain``)."""
    basis, kind = memory
    if kind == "remove" and basis.shape[1] > basis.shape[0] / 2:
        return torch.linalg.svd(basis, full_matrices=True)[0][:, basis.shape[1]:], "retain"
    return memory


def update_memory(memory: Optional[Memory], activation: Tensor, threshold: float) -> Memory:
    """The memory after a task: :func:`first_memory` or :func:`grow_memory`, then :func:`settle_memory`."""
    memory = first_memory(activation, threshold) if memory is None else grow_memory(memory, activation, threshold)
    return settle_memory(memory)


@register_method("inflora")
class InfLoRA(LoRAMethod):
    """Wrappers by block (``wrappers``), the head (D -> C), the memory by block (basis, kind)."""

    targets = ("k", "v")

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.memory: Dict[str, Memory] = {}

    # ---- training ----------------------------------------------------------
    @torch.no_grad()
    def representations(self, loader) -> Dict[str, Tensor]:
        """Block -> the mean of x x^T (D, D, float64) over every token entering its qkv, over ``loader``."""
        self.model.eval()
        for wrapper in self.wrappers.values():
            wrapper.reset_record()
            wrapper.record = True
        try:
            for images, _ in loader:
                self.model(images.to(self.device))
        finally:
            for wrapper in self.wrappers.values():
                wrapper.record = False
        out = {key: w.gram / max(w.tokens, 1) for key, w in self.wrappers.items()}
        for wrapper in self.wrappers.values():
            wrapper.reset_record()
        return out

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c = self.c
        branches = {key: w.add_branch(c.rank) for key, w in self.wrappers.items()}
        for branch in branches.values():
            branch.down.requires_grad_(False)
        with torch.no_grad():
            for key, cov in self.representations(loaders.train).items():
                down = design_down(cov, self.memory.get(key), c.rank, c.design) * c.down_scale
                branches[key].down.copy_(down.to(branches[key].down.dtype).expand_as(branches[key].down))
        self._train(task, loaders, list(branches.values()))
        for branch in branches.values():
            branch.up.requires_grad_(False)
        eps = threshold_at(task, self.num_tasks, c.threshold, c.threshold_end)
        for key, cov in self.representations(loaders.train).items():
            self.memory[key] = update_memory(self.memory.get(key), cov, eps)

    def _train(self, task: int, loaders: TaskLoaders, branches: List[LoRABranch]) -> None:
        c, model, head = self.c, self.model, self.head
        params = [b.up for b in branches] + list(head.parameters())
        optimizer = torch.optim.Adam(params, lr=c.lr, betas=(0.9, 0.999), weight_decay=c.weight_decay)
        model.eval()  # the official code trains with the network in eval mode

        def forward(batch):
            x, y = batch
            return {"logits": head(model(to_device(x, self.device))), "labels": to_device(y, self.device)}

        run_stage(Stage("inflora", task, c.epochs, optimizer, epoch_scheduler(optimizer, c.schedule, c.epochs,
                                                                               stepping=c.schedule_stepping),
                        clip=c.grad_clip, clip_params=params, train_modules=[head], lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task))})
        head.eval()

    # ---- state ---------------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"branches": branch_state(self.wrappers),
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()},
                "memory": {key: basis.cpu() for key, (basis, _) in self.memory.items()},
                "kinds": {key: kind for key, (_, kind) in self.memory.items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        load_branches(self.wrappers, state["branches"])
        self.head.load_state_dict(state["head"])
        self.memory = {key: (basis.to(self.device), state["kinds"][key]) for key, basis in state["memory"].items()}

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "rank": c.rank, "lora_layers": self.layers,
                "branches": len(next(iter(self.wrappers.values())).branches) if self.wrappers else 0,
                "memory_dims": {key: int(basis.shape[1]) for key, (basis, _) in self.memory.items()},
                "memory_kinds": {key: kind for key, (_, kind) in self.memory.items()}, "design": c.design}

    def summary(self) -> str:
        c = self.c
        return (f"method: inflora (a rank-{c.rank} LoRA branch per task on k, v of blocks {self.layers}; A designed "
                f"outside the old subspace, memory threshold {c.threshold:g} -> {c.threshold_end:g})")

