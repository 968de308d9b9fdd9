"""Building blocks of HiDe-Prompt's stages (paper Appendix C, eqs. 56-59) on the shared loop.

* :func:`extract_features` — features (N, D) of a loader, optionally prompted;
* :func:`fit_on_features` — a head trained with masked CE on cached features
  (TII on cached features; the no-prompt reference's classifier);
* :func:`align_head` — TII alignment (eq. 59) and TAP (eq. 58): a head trained
  on pseudo-features sampled in equal numbers from stored Gaussians;
* :data:`REGULARISERS` — WTP's contrastive regulariser: the authors' ``official``
  form or the paper's ``eq56``.

The loop itself (optimiser steps, clipping, epoch log, non-finite checks) is
:func:`norga.toolkit.training.run_stage`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .devices import to_device
from .distributed import gather_rows, is_main, shard_of
from .gaussian import GaussianStore, draw_generator
from .heads import class_mask
from .schedules import epoch_scheduler
from .training import Stage, cross_entropy_term, run_stage, shuffled_batches


@torch.no_grad()
def extract_features(model: nn.Module, loader, device, prompts=None, desc: str = "features") -> Tuple[Tensor, Tensor]:
    """Pre-logits features (N, D) on CPU and labels (N,); ``prompts`` (e.g. a (P, 2, L, H, Dh) prefix) is shared.

    Under torchrun the loader holds this process's contiguous part of the dataset
    (:class:`~norga.toolkit.distributed.ContiguousShard`); the parts are gathered, so every
    process returns all N samples in dataset order, each once.
    """
    model.eval()
    feats, labels = [], []
    for x, y in tqdm(loader, desc=desc, leave=False, disable=not is_main()):
        feats.append(model(x.to(device), prompts).float().cpu())
        labels.append(torch.as_tensor(y))
    feats = torch.cat(feats) if feats else torch.empty(0, model.embed_dim)
    labels = torch.cat(labels) if labels else torch.empty(0, dtype=torch.long)
    shard = shard_of(loader)
    if shard is None:
        return feats, labels
    return gather_rows(feats, shard.part_sizes()), gather_rows(labels, shard.part_sizes())


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


def fit_on_features(head: nn.Module, feats: Tensor, labels: Tensor, allowed: Tensor, epochs: int, lr: float,
                    batch_size: int, generator: torch.Generator, device, grad_clip: Optional[float] = None,
                    stage: str = "tii", task: int = 0, lr_key: Optional[str] = None) -> None:
    """``head`` on cached features (N, D) with Adam, masked CE over ``allowed`` (bool (C,)), fresh shuffles
    from ``generator`` every epoch; ``stage`` names the epoch-log lines."""
    optimizer = torch.optim.Adam(head.parameters(), lr=lr)
    params = list(head.parameters())
    run_stage(Stage(stage, task, epochs, optimizer, clip=grad_clip, clip_params=params, train_modules=[head],
                    lr_key=lr_key),
              batches=lambda epoch: shuffled_batches(feats, labels, batch_size, generator),
              forward=lambda b: {"logits": head(to_device(b[0], device)), "labels": to_device(b[1], device)},
              terms={"ce": cross_entropy_term(allowed)})


def align_head(head: nn.Module, store: GaussianStore, classes: Sequence[int], num_classes: int,
               epochs: int, lr: float, per_class: int, batch_size: int, generator: torch.Generator,
               device, stage: str, max_batches: Optional[int] = None, task: int = 0,
               lr_key: Optional[str] = None, weight_decay: float = 0.0) -> None:
    """Train ``head`` on pseudo-features sampled from ``store`` for every class in ``classes``.

    Each epoch draws ``per_class`` fresh samples per class, shuffles them and
    runs batches of ``batch_size`` — all of them, or only the first
    ``max_batches`` (the authors' code runs C_old batches, C_old = classes of
    earlier tasks, so part of the samples is never used). Logits are restricted
    to ``classes`` (all classes seen so far). SGD (momentum 0.9, ``weight_decay``) with cosine decay.
    ``stage`` (``tii_align`` or ``tap``) names the epoch-log lines.
    The samples are drawn on ``device`` (:func:`~norga.toolkit.gaussian.draw_generator`: on the CPU from
    ``generator`` itself, exactly as before; elsewhere from a device generator seeded by one draw of it);
    the shuffles come from ``generator`` on the CPU.
    """
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    draws = draw_generator(generator, device)

    def batches(epoch: int):
        feats, labels = store.sample(classes, per_class, draws)
        return shuffled_batches(feats, labels, batch_size, generator, max_batches)

    run_stage(Stage(stage, task, epochs, optimizer, epoch_scheduler(optimizer, "cosine", epochs),
                    train_modules=[head], lr_key=lr_key),
              batches=batches,
              forward=lambda b: {"logits": head(to_device(b[0], device)), "labels": to_device(b[1], device)},
              terms={"ce": cross_entropy_term(class_mask(num_classes, classes, device))})
