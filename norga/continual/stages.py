"""Training stages of HiDe-Prompt with NoRGa (paper Appendix C, eqs. 56-59).

* :func:`extract_features` — features (N, D) of a loader, optionally prompted;
* :func:`train_tii_on_images` / :func:`train_tii_on_features` — TII head,
  cross-entropy over the current task's classes;
* :func:`align_head` — TII alignment (eq. 59) and TAP (eq. 58): a head trained
  on pseudo-features sampled in equal numbers from stored Gaussians;
* :func:`train_wtp` — the task's prompt (+ NoRGa gates on task 1) and the
  classifier head, CE over the task's classes + lambda * contrastive reg.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .gaussian import GaussianStore
from .heads import class_mask

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


def contrastive_regulariser(features: Tensor, prototypes: Tensor, temperature: float) -> Tensor:
    """Eq. (56) on L2-normalised vectors, averaged over samples and prototypes.

    features (B, D) of the current task; prototypes (C_old, D) = means of old
    classes' instructed Gaussians. Minimising it pushes features away from
    old prototypes relative to each other.
    """
    h = F.normalize(features, dim=-1)
    mu = F.normalize(prototypes.to(h), dim=-1)
    sim_protos = h @ mu.T / temperature  # (B, C_old)
    log_denominator = torch.logsumexp(torch.cat([h @ h.T / temperature, sim_protos], dim=1), dim=1)
    return (sim_protos - log_denominator[:, None]).mean()


def _scheduler(optimizer, schedule: str, epochs: int, milestones: Sequence[int] = (), gamma: float = 0.1):
    makers = {
        "constant": lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
        "step": lambda: torch.optim.lr_scheduler.MultiStepLR(optimizer, list(milestones), gamma),
        "cosine": lambda: torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(epochs, 1)),
    }
    return makers[schedule]()


def train_tii_on_images(model: nn.Module, tii_head: nn.Module, loader, classes: Sequence[int],
                        num_classes: int, epochs: int, lr: float, device) -> None:
    """TII head on frozen features of (augmented) images, CE over ``classes`` only."""
    optimizer = torch.optim.Adam(tii_head.parameters(), lr=lr)
    allowed = class_mask(num_classes, classes, device)
    for _ in tqdm(range(epochs), desc="TII", leave=False):
        for x, y in loader:
            with torch.no_grad():
                model.eval()
                feats = model(x.to(device))
            _step(optimizer, masked_cross_entropy(tii_head(feats), y.to(device), allowed))


def train_tii_on_features(tii_head: nn.Module, feats: Tensor, labels: Tensor, classes: Sequence[int],
                          num_classes: int, epochs: int, lr: float, batch_size: int,
                          generator: torch.Generator, device) -> None:
    """TII head on cached frozen features (N, D), CE over ``classes`` only."""
    optimizer = torch.optim.Adam(tii_head.parameters(), lr=lr)
    allowed = class_mask(num_classes, classes, device)
    for _ in tqdm(range(epochs), desc="TII", leave=False):
        for xb, yb in _batches(feats, labels, batch_size, generator):
            _step(optimizer, masked_cross_entropy(tii_head(xb.to(device)), yb.to(device), allowed))


def align_head(head: nn.Module, store: GaussianStore, classes: Sequence[int], num_classes: int,
               epochs: int, lr: float, per_class: int, batch_size: int, generator: torch.Generator,
               device, desc: str) -> None:
    """Train ``head`` on pseudo-features sampled from ``store`` for every class in ``classes``.

    Each epoch draws ``per_class`` fresh samples per class; logits are restricted
    to ``classes`` (all classes seen so far). SGD (momentum 0.9) with cosine decay.
    """
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    scheduler = _scheduler(optimizer, "cosine", epochs)
    allowed = class_mask(num_classes, classes, device)
    head.train()
    for _ in tqdm(range(epochs), desc=desc, leave=False):
        feats, labels = store.sample(classes, per_class, generator)
        for xb, yb in _batches(feats, labels, batch_size, generator):
            _step(optimizer, masked_cross_entropy(head(xb.to(device)), yb.to(device), allowed))
        scheduler.step()


def train_wtp(model: nn.Module, head: nn.Module, prompt_fn: Callable[[], Tensor], prompt_params: list,
              gate_params: list, loader, classes: Sequence[int], num_classes: int, prototypes: Optional[Tensor],
              cfg, lr: float, device) -> None:
    """Within-task prediction (eq. 57): prompt (+ gates) and head, CE + reg * L_CR.

    ``prompt_fn()`` returns the ensembled prompt p_t (P, 2, L, H, Dh) with
    gradients to e_t; ``prototypes`` (C_old, D) or None on the first task.
    """
    groups = [{"params": prompt_params + gate_params, "lr": lr},
              {"params": list(head.parameters()), "lr": lr * cfg.head_lr_scale}]
    optimizer = torch.optim.Adam(groups, betas=(0.9, 0.999), weight_decay=0.0)
    scheduler = _scheduler(optimizer, cfg.schedule, cfg.epochs, cfg.milestones, cfg.gamma)
    allowed = class_mask(num_classes, classes, device)
    trainable = prompt_params + gate_params + list(head.parameters())
    for _ in tqdm(range(cfg.epochs), desc="WTP", leave=False):
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            feats = model(x, prompt_fn())
            loss = masked_cross_entropy(head(feats), y, allowed, cfg.label_smoothing)
            if prototypes is not None and cfg.reg > 0:
                loss = loss + cfg.reg * contrastive_regulariser(feats, prototypes, cfg.temperature)
            _step(optimizer, loss, trainable, cfg.grad_clip)
        scheduler.step()
    model.eval()


def masked_cross_entropy(logits: Tensor, labels: Tensor, allowed: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy over the ``allowed`` classes only (bool (C,)); other logits are dropped.

    Equivalent to masking them with -inf, but finite with label smoothing.
    """
    position = torch.cumsum(allowed.long(), 0) - 1  # class id -> column among allowed classes
    if not allowed[labels].all():
        raise ValueError("a label lies outside the allowed classes")
    return F.cross_entropy(logits[:, allowed], position[labels], label_smoothing=label_smoothing)


def _step(optimizer, loss: Tensor, params: Optional[list] = None, clip: Optional[float] = None) -> None:
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss became {loss.item()}; lower the learning rate")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None and params:
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()


def _batches(feats: Tensor, labels: Tensor, batch_size: int, generator: torch.Generator):
    order = torch.randperm(len(labels), generator=generator)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield feats[idx], labels[idx]
