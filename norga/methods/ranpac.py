"""RanPAC as a registered method: a fixed random projection of backbone features and a ridge classifier.

Phase 1 (optional, ``method.first_session.tuning``): on task 0 only, a tuning (adapters, VPT-deep or SSF;
:mod:`norga.models.adapters`) is trained with a cosine head (:func:`.adapter_stage.tune_first_task`), then frozen
for good; the backbone f below is then the tuned one (its features only, not concatenated with the frozen ones).
Without it nothing is trained and f is the frozen backbone.

Phase 2: a feature f (D,) becomes h = act(f W) (M,) with W (D, M) Gaussian, drawn once from
the run seed and kept for the whole run. Task t adds its un-augmented training samples to the Gram matrix
G = sum h h^T (M, M) and to C = sum h y^T (M, classes) (y one-hot); then lambda is chosen on a held-out part of
task t's samples (:func:`select_ridge`: one eigendecomposition serves every candidate) and the classifier is
W_o = (G + lambda I)^-1 C (:func:`ridge_solve`).
A test sample's logits are h W_o; classes not learned yet score -inf. It infers no task id.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..toolkit.seeding import named_generator, task_generator
from ..toolkit.stages import extract_features
from . import register_method
from .adapter_stage import TunedView, attach_tuning, cached_features, freeze, tune_first_task
from .base import Method, Prediction, TaskLoaders, TestBatch, chosen_blocks

PROJECTION_STREAM = "ranpac.projection"  # named_generator(seed, 0, PROJECTION_STREAM): independent of the data
SPLIT_STAGE = 1  # stage of task_generator: each task's split for choosing lambda (public: the cross-check draws it)
TUNED = 0  # the tuning index of the phase-1 tuning (RanPAC has at most one)


def random_features(feats: Tensor, projection: Tensor, activation: str) -> Tensor:
    """(N, D) features, (D, M) projection -> (N, M) act(feats @ projection) in float64."""
    h = feats.double() @ projection.double()
    return F.relu(h) if activation == "relu" else h


def ridge_solve(gram: Tensor, targets: Tensor, ridge: float) -> Tensor:
    """(M, M) Gram matrix G, (M, K) C -> (M, K) W_o = (G + ridge I)^-1 C (a linear solve, not an inverse)."""
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    return torch.linalg.solve(gram + ridge * eye, targets)


def ridge_family(h: Tensor, y: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """One symmetric eigendecomposition of (h (N, M), y (N, K)) serving every ridge: (e (r,), left (M, r),
    right (r, K)) with W_lambda = (h^T h + lambda I)^-1 h^T y = left diag(1 / (e + lambda)) right.

    N >= M: h^T h = V diag(e) V^T, left = V, right = V^T h^T y. N < M (the official M = 10000 on a task's few
    hundred samples): the kernel h h^T = U diag(e) U^T (N, N) instead, left = h^T U, right = U^T y, since
    (h^T h + lambda I)^-1 h^T = h^T (h h^T + lambda I)^-1. Eigenvalues are clamped at 0 (both matrices are PSD)."""
    if h.shape[0] < h.shape[1]:
        e, u = torch.linalg.eigh(h @ h.T)
        return e.clamp_min(0.0), h.T @ u, u.T @ y
    e, v = torch.linalg.eigh(h.T @ h)
    return e.clamp_min(0.0), v, v.T @ (h.T @ y)


def select_ridge(h: Tensor, y: Tensor, ridges: Sequence[float], val_fraction: float, generator) -> float:
    """The ridge of ``ridges`` whose W_o fitted on a random (1 - val_fraction) part of (h (N, M), y (N, K))
    predicts the rest with the least mean squared error (first one on ties). One decomposition of the fitting
    part (:func:`ridge_family`) serves every candidate instead of one (M, M) solve each."""
    order = torch.randperm(h.shape[0], generator=generator)
    n_fit = int(h.shape[0] * (1.0 - val_fraction))
    fit, val = order[:n_fit], order[n_fit:]
    if n_fit == 0 or len(val) == 0:
        raise ValueError(f"{h.shape[0]} samples cannot be split by val_fraction={val_fraction}")
    e, left, right = ridge_family(h[fit], y[fit])
    val_left, y_val = h[val] @ left, y[val]  # (N_val, r): the held-out predictions are val_left diag(.) right
    losses = [((val_left / (e + float(r))) @ right - y_val).pow(2).mean().item() for r in ridges]
    return float(ridges[min(range(len(losses)), key=losses.__getitem__)])


@register_method("ranpac")
class RanPAC(Method):
    """Projection W (D, M), Gram G (M, M), C (M, classes), classifier W_o (M, classes); ``learned`` (classes,);
    ``tuned``: the phase-1 tuning's modules (None without phase 1), trained on task 0 only."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.model = self.frozen_token_model(vit)  # freezes every backbone weight before a tuning exists
        m, dim = cfg.method.projection_dim, self.model.embed_dim
        first = cfg.method.first_session
        self.layers = [] if first.tuning == "none" else chosen_blocks(vit, first.tuned_layers,
                                                                      "method.first_session.tuned_layers")
        self.tuned = None if first.tuning == "none" else attach_tuning(self.model.vit, first.tuning, self.layers,
                                                                      first, dim)
        self.active: Optional[int] = None if self.tuned is None else TUNED  # the tuning that makes the features
        gen = named_generator(cfg.seed, 0, PROJECTION_STREAM)
        self.projection = torch.randn(dim, m, generator=gen).to(device)
        self.gram = torch.zeros(m, m, dtype=torch.float64, device=device)
        self.targets = torch.zeros(m, self.num_classes, dtype=torch.float64, device=device)
        self.head = torch.zeros(m, self.num_classes, dtype=torch.float64, device=device)
        self.learned = torch.zeros(self.num_classes, dtype=torch.bool, device=device)
        self.chosen_ridges: List[float] = []

    @property
    def train_batch_size(self) -> int:
        """Phase 1's batch; without phase 1 the augmented loader is never used (the evaluation batch)."""
        return self.cfg.eval_batch_size if self.tuned is None else self.cfg.method.first_session.batch_size

    def lift(self, feats: Tensor) -> Tensor:
        """(N, D) backbone features -> (N, M) random features h on the device."""
        return random_features(feats.to(self.device), self.projection, self.cfg.method.activation)

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        if task == 0 and self.tuned is not None:
            self._first_session(task, loaders)
        view = TunedView(self.model, self.active)
        feats, labels = (self.frozen_pass(view, loaders.train_plain, "backbone feats") if self.active is None
                         else extract_features(view, loaders.train_plain, self.device, desc="backbone feats"))
        missing = [c for c in self.task_classes[task] if not (labels == c).any()]
        if missing:
            raise ValueError(f"classes {missing} of task {task} have no training samples")
        h = self.lift(feats)
        y = F.one_hot(labels.long(), self.num_classes).double().to(self.device)
        self.gram += h.T @ h
        self.targets += h.T @ y
        opts = self.cfg.method
        gen = task_generator(self.cfg.seed, task, SPLIT_STAGE)
        ridge = select_ridge(h, y, list(opts.ridges), opts.val_fraction, gen)
        self.chosen_ridges.append(ridge)
        self.head = ridge_solve(self.gram, self.targets, ridge)
        self.learned[self.task_classes[task]] = True

    def _first_session(self, task: int, loaders: TaskLoaders) -> None:
        """Phase 1 (task 0 only): train the tuning on the task's augmented images with a cosine head over its
        classes; freeze it."""
        tune_first_task("ranpac", self.model, self.tuned, self.task_classes[task], self.num_classes, loaders.train,
                        self.cfg.method.first_session, self.device, self.config_key("first_session.lr"))

    def logits(self, feats: Tensor) -> Tensor:
        """(B, D) backbone features -> (B, C) logits h W_o (float32); -inf for classes not learned yet."""
        scores = (self.lift(feats) @ self.head).float()
        return scores.masked_fill(~self.learned, float("-inf"))

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        if self.active is None:  # the frozen backbone: the feature store's rows when one is set
            self.preload_frozen(TunedView(self.model, None), batch, cache)
        feats = cached_features(self.model, batch, cache, self.active, self.device)  # final once task 0 is learned
        logits = self.logits(feats.float())
        return Prediction(logits, logits)

    def state_dict(self, task: int) -> Dict[str, Any]:
        state = {"projection": self.projection.cpu(), "gram": self.gram.cpu(), "targets": self.targets.cpu(),
                 "head": self.head.cpu(), "learned": self.learned.cpu(), "ridges": list(self.chosen_ridges)}
        if self.tuned is not None:
            state["tuned"] = {k: v.cpu() for k, v in self.tuned.state_dict().items()}
        return state

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        if self.tuned is not None:
            self.tuned.load_state_dict(state["tuned"])
            freeze(self.tuned)  # every checkpoint comes after task 0
        self.projection.copy_(state["projection"].to(self.device))
        self.head.copy_(state["head"].to(self.device))
        self.learned.copy_(state["learned"].to(self.device))
        self.chosen_ridges = [float(r) for r in state["ridges"]]
        if with_training_state:
            self.gram.copy_(state["gram"].to(self.device))
            self.targets.copy_(state["targets"].to(self.device))

    def describe(self) -> Dict[str, Any]:
        opts = self.cfg.method
        out = {"name": self.name, "projection_dim": opts.projection_dim, "activation": opts.activation,
               "ridges": list(self.chosen_ridges), "classes": int(self.learned.sum())}
        if self.tuned is not None:
            out.update(first_session=opts.first_session.tuning, tuned_layers=self.layers,
                       tuned_parameters=sum(p.numel() for p in self.tuned.parameters()))
        return out

    def summary(self) -> str:
        opts, first = self.cfg.method, self.cfg.method.first_session
        phase1 = "" if self.tuned is None else (f"{first.tuning} on blocks {self.layers} tuned on task 0 only for "
                                                 f"{first.epochs} epochs, then ")
        return (f"method: ranpac ({phase1}random projection {self.model.embed_dim}->{opts.projection_dim}, "
                f"{opts.activation}, ridge classifier, lambda from {len(opts.ridges)} values on "
                f"{opts.val_fraction:g} held out)")
