"""Training stages of HiDe-Prompt with NoRGa (paper Appendix C, eqs. 56-59).

* :func:`extract_features` — features (N, D) of a loader, optionally prompted;
* :func:`train_tii_on_images` / :func:`train_tii_on_features` — TII head,
  cross-entropy over the current task's classes;
* :func:`align_head` — TII alignment (eq. 59) and TAP (eq. 58): a head trained
  on pseudo-features sampled in equal numbers from stored Gaussians;
* :func:`train_wtp` — the task's prompt (+ NoRGa gates on task 1) and the
  classifier head, CE over the task's classes + lambda * contrastive reg
  (``REGULARISERS``: the authors' ``official`` form or the paper's ``eq56``).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..errors import NonFiniteLoss
from .epochlog import log_epoch
from .gaussian import GaussianStore
from .heads import class_mask
from .schedules import epoch_scheduler

PrefixFn = Callable[[Tensor], Optional[Tensor]]  # labels (B,) -> prefix (B, P, 2, L, H, Dh) or None


@torch.no_grad()
def extract_features(model: nn.Module, loader, device, prefix: Optional[Tensor] = None,
                     desc: str = "features") -> Tuple[Tensor, Tensor]:
    """Pre-logits features (N, D) on CPU and labels (N,); ``prefix`` (P, 2, L, H, Dh) is shared."""
    model.eval()
    feats, labels = [], []
    for x, y in tqdm(loader, desc=desc, leave=False):
        feats.append(model(x.to(device), prefix).float().cpu())
        labels.append(torch.as_tensor(y))
    return torch.cat(feats), torch.cat(labels)


def contrastive_regulariser(features: Tensor, prototypes: Optional[Tensor], temperature: float) -> Tensor:
    """Eq. (56) on L2-normalised vectors, averaged over samples and prototypes (``reg_form: eq56``).

    features (B, D) of the current task; prototypes (C_old, D) = means of old
    classes' instructed Gaussians. Minimising it pushes features away from
    old prototypes relative to each other. Zero when there are no prototypes (first task).
    """
    if prototypes is None or len(prototypes) == 0:
        return features.new_zeros(())
    h = F.normalize(features, dim=-1)
    mu = F.normalize(prototypes.to(h), dim=-1)
    sim_protos = h @ mu.T / temperature  # (B, C_old)
    log_denominator = torch.logsumexp(torch.cat([h @ h.T / temperature, sim_protos], dim=1), dim=1)
    return (sim_protos - log_denominator[:, None]).mean()


def official_contrastive_regulariser(features: Tensor, prototypes: Optional[Tensor], temperature: float) -> Tensor:
    """The authors' coded regulariser (``reg_form: official``), on unnormalised vectors.

    M = [prototypes; features] ((C_old + B), D), or the features alone on the
    first task; loss = mean over rows r of CE(M M^T / temperature, target r),
    i.e. each row's positive is itself. The prototype rows are in the CE too.
    """
    rows = features if prototypes is None or len(prototypes) == 0 else torch.cat([prototypes.to(features), features])
    similarity = rows @ rows.T / temperature
    return F.cross_entropy(similarity, torch.arange(len(rows), device=rows.device))


REGULARISERS = {"official": official_contrastive_regulariser, "eq56": contrastive_regulariser}


class EpochMeter:
    """Loss terms of one epoch of one stage: summed per step, reported as means with the lr.

    ``stage``: ``tii``, ``tii_align``, ``wtp``, ``tap`` or ``head`` (the keys of
    ``epochs.jsonl``, see :mod:`norga.continual.epochlog`); ``task`` and ``epoch`` 0-based.
    """

    def __init__(self, stage: str, task: int, epoch: int):
        self.stage, self.task, self.epoch = stage, task, epoch
        self.sums: Dict[str, float] = {}
        self.steps = 0

    def step(self, optimizer, loss: Tensor, params: Optional[list] = None, clip: Optional[float] = None,
             **terms: Tensor) -> None:
        """One optimiser step on ``loss``; ``terms`` (e.g. ce, reg) are logged beside it."""
        value = float(loss.detach())
        if not math.isfinite(value):
            raise NonFiniteLoss(value, self.stage, self.epoch, self.task)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None and params:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        for name, term in (("loss", value), *((k, float(v.detach())) for k, v in terms.items())):
            self.sums[name] = self.sums.get(name, 0.0) + term
        self.steps += 1

    def means(self) -> Dict[str, float]:
        return {k: v / max(self.steps, 1) for k, v in self.sums.items()}

    def report(self, optimizer, **extra) -> Dict[str, float]:
        """Write the epoch's line to the run's epoch log (a no-op when none is open); returns the means."""
        means = self.means()
        log_epoch(stage=self.stage, task=self.task, epoch=self.epoch, lr=[g["lr"] for g in optimizer.param_groups],
                  steps=self.steps, **means, **extra)
        return means


def train_tii_on_images(model: nn.Module, tii_head: nn.Module, loader, classes: Sequence[int],
                        num_classes: int, epochs: int, lr: float, device, grad_clip: Optional[float] = None,
                        task: int = 0) -> None:
    """TII head on frozen features of (augmented) images, CE over ``classes`` only."""
    optimizer = torch.optim.Adam(tii_head.parameters(), lr=lr)
    allowed = class_mask(num_classes, classes, device)
    params = list(tii_head.parameters())
    for epoch in tqdm(range(epochs), desc="TII", leave=False):
        meter = EpochMeter("tii", task, epoch)
        tii_head.train()
        for x, y in loader:
            with torch.no_grad():
                model.eval()
                feats = model(x.to(device))
            meter.step(optimizer, masked_cross_entropy(tii_head(feats), y.to(device), allowed), params, grad_clip)
        meter.report(optimizer)


def train_tii_on_features(tii_head: nn.Module, feats: Tensor, labels: Tensor, classes: Sequence[int],
                          num_classes: int, epochs: int, lr: float, batch_size: int,
                          generator: torch.Generator, device, grad_clip: Optional[float] = None,
                          stage: str = "tii", task: int = 0) -> None:
    """A head on cached features (N, D), CE over ``classes`` only (the TII head, or the no-prompt ``head``)."""
    optimizer = torch.optim.Adam(tii_head.parameters(), lr=lr)
    allowed = class_mask(num_classes, classes, device)
    params = list(tii_head.parameters())
    for epoch in tqdm(range(epochs), desc=stage.upper(), leave=False):
        meter = EpochMeter(stage, task, epoch)
        tii_head.train()
        for xb, yb in _batches(feats, labels, batch_size, generator):
            meter.step(optimizer, masked_cross_entropy(tii_head(xb.to(device)), yb.to(device), allowed), params,
                       grad_clip)
        meter.report(optimizer)


def align_head(head: nn.Module, store: GaussianStore, classes: Sequence[int], num_classes: int,
               epochs: int, lr: float, per_class: int, batch_size: int, generator: torch.Generator,
               device, stage: str, max_batches: Optional[int] = None, task: int = 0) -> None:
    """Train ``head`` on pseudo-features sampled from ``store`` for every class in ``classes``.

    Each epoch draws ``per_class`` fresh samples per class, shuffles them and
    runs batches of ``batch_size`` — all of them, or only the first
    ``max_batches`` (the authors' code runs C_old batches, C_old = classes of
    earlier tasks, so part of the samples is never used). Logits are restricted
    to ``classes`` (all classes seen so far). SGD (momentum 0.9) with cosine decay.
    ``stage`` (``tii_align`` or ``tap``) names the epoch-log lines.
    """
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    scheduler = epoch_scheduler(optimizer, "cosine", epochs)
    allowed = class_mask(num_classes, classes, device)
    head.train()
    for epoch in tqdm(range(epochs), desc=stage.upper(), leave=False):
        meter = EpochMeter(stage, task, epoch)
        feats, labels = store.sample(classes, per_class, generator)
        for i, (xb, yb) in enumerate(_batches(feats, labels, batch_size, generator)):
            if max_batches is not None and i >= max_batches:
                break
            meter.step(optimizer, masked_cross_entropy(head(xb.to(device)), yb.to(device), allowed))
        meter.report(optimizer)
        scheduler.step()


def train_wtp(model: nn.Module, head: nn.Module, prompt_fn: Callable[[], Tensor], prompt_params: list,
              gate_params: list, loader, classes: Sequence[int], num_classes: int, prototypes: Optional[Tensor],
              cfg, lr: float, device, task: int = 0,
              describe: Optional[Callable[[], dict]] = None) -> List[Dict[str, float]]:
    """Within-task prediction (eq. 57): prompt (+ gates) and head, CE + reg * L_CR.

    ``prompt_fn()`` returns the ensembled prompt p_t (P, 2, L, H, Dh) with
    gradients to e_t; ``prototypes`` (C_old, D) or None on the first task.
    ``describe()`` (e.g. the gates' alpha/tau) is added to every epoch-log line.
    Returns the per-epoch means of ``loss``, ``ce`` and ``reg`` (reg = lambda * L_CR).
    """
    groups = [{"params": prompt_params + gate_params, "lr": lr},
              {"params": list(head.parameters()), "lr": lr * cfg.head_lr_scale}]
    optimizer = torch.optim.Adam(groups, betas=(0.9, 0.999), weight_decay=0.0)
    scheduler = epoch_scheduler(optimizer, cfg.schedule, cfg.epochs, cfg.milestones, cfg.gamma, cfg.min_lr,
                                cfg.schedule_stepping)
    allowed = class_mask(num_classes, classes, device)
    trainable = prompt_params + gate_params + list(head.parameters())
    regulariser = REGULARISERS[cfg.reg_form]
    history = []
    for epoch in tqdm(range(cfg.epochs), desc="WTP", leave=False):
        meter = EpochMeter("wtp", task, epoch)
        model.train()
        head.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            feats = model(x, prompt_fn())
            ce = masked_cross_entropy(head(feats), y, allowed, cfg.label_smoothing)
            reg = cfg.reg * regulariser(feats, prototypes, cfg.temperature) if cfg.reg > 0 else ce.new_zeros(())
            meter.step(optimizer, ce + reg, trainable, cfg.grad_clip, ce=ce, reg=reg)
        history.append(meter.report(optimizer, **(describe() if describe else {})))
        scheduler.step()
    model.eval()
    return history


def masked_cross_entropy(logits: Tensor, labels: Tensor, allowed: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy over the ``allowed`` classes only (bool (C,)); other logits are dropped.

    Equivalent to masking them with -inf, but finite with label smoothing.
    """
    position = torch.cumsum(allowed.long(), 0) - 1  # class id -> column among allowed classes
    if not allowed[labels].all():
        raise ValueError("a label lies outside the allowed classes")
    return F.cross_entropy(logits[:, allowed], position[labels], label_smoothing=label_smoothing)


def _batches(feats: Tensor, labels: Tensor, batch_size: int, generator: torch.Generator):
    order = torch.randperm(len(labels), generator=generator)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield feats[idx], labels[idx]
