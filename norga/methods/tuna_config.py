"""Config section of the ``tuna`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import ConfigError, _f, method_config
from .adapter_config import AdapterTuningConfig


@method_config("tuna", module="norga.methods.tuna")
@dataclass
class TUNAConfig(AdapterTuningConfig):
    """TUNA: a task-specific bottleneck adapter per task (cosine classifier, CosFace loss, optional orthogonality
    penalty), a universal adapter, entropy-based selection of the task adapter at test time, and the sum of the
    selected task adapter's and the universal adapter's softmax; classifier alignment on Gaussian class statistics.

    Wang, Zhou, Ye, "Integrating Task-Specific and Universal Adapters for Pre-Trained Model-based Class-Incremental
    Learning" (ICCV 2025). Defaults: the authors' code at commit 77d4f10 of the public fork Ngahoang2005/ICCV2025-TUNA
    (``exps/tuna_cifar.json``, ``models/tuna.py``, ``backbone/vit_tuna.py``, ``utils/inc_net.py``); the official
    LAMDA-CL repository was not reachable. docs/methods/tuna.md lists every source and difference.
    """

    name: str = _f("tuna")
    adapter_layers: Optional[List[int]] = _f(None)  # blocks with adapters; null: all 12 (vit_tuna)
    bottleneck: int = _f(16, ge=1)  # vit_tuna init_adapters: Adapter(bottleneck=16)
    epochs: int = _f(15, ge=1)  # per task; tuna_cifar.json tuned_epoch: 15 (ImageNet-R: 10)
    lr: float = _f(0.01, gt=0.0)  # SGD on the adapter and the head; init_lr: 0.01 (ImageNet-R: 0.02)
    batch_size: int = _f(16, ge=1)  # batch_size: 16 (ImageNet-R: 32)
    # previous: task t's adapter starts from task t-1's trained adapter (the code trains one cur_adapter throughout
    # and snapshots it after each task); fresh: a new zero-output adapter per task
    adapter_init: str = _f("previous", choices=("previous", "fresh"))
    scale: float = _f(20.0, gt=0.0)  # s of the CosFace loss, the alignment logits and the test logits; scale: 20
    margin: float = _f(0.0, ge=0.0)  # CosFace margin m; m: 0.0
    orth_weight: float = _f(0.0, ge=0.0)  # reg x exp(-(t+1)) times the orthogonality penalty; 0: off (use_orth: false)
    # true: the penalty's gradient also moves the older task adapters' up-projections (the code: their snapshots keep
    # requires_grad and sit in the optimiser); false: older adapters stay frozen (only with orth_weight > 0)
    orth_updates_old: bool = _f(True)
    # last_task: the universal branch at test time runs the adapter just trained (the code: adapter_id = cur_task + 1
    # reaches cur_adapter; the merged adapter is built but never used); merged: the elect-merged adapter (the paper)
    universal: str = _f("last_task", choices=("last_task", "merged"))
    ca_epochs: int = _f(30, ge=0)  # classifier alignment after every task but the first; crct_epochs: 30
    ca_lr: float = _f(0.005, gt=0.0)  # ca_lr: 0.005
    ca_per_class: int = _f(80, ge=1)  # pseudo-features per class per epoch; the code: 5 x batch_size
    ca_cosine_period: int = _f(5, ge=1)  # CosineAnnealingLR(T_max=5) stepped per epoch (a period of 10 epochs)
    stats: str = _f("covariance", choices=("covariance", "variance"))  # ca_storage_efficient_method
    stats_ridge: float = _f(1e-4, ge=0.0)  # added to the covariance's diagonal (the code: 1e-4)
    # none: the sampled classes keep their mean (decay: false); reference: the code's decay with its negative task
    # size (t_id = class_index // (known - total)); by_task: mean x (0.9 + 0.1 (t_c + 1) / (t + 1)), t_c the task
    ca_mean_decay: str = _f("none", choices=("none", "reference", "by_task"))

    def __post_init__(self):
        super().__post_init__()
        if self.adapter_layers is not None and not self.adapter_layers:
            raise ConfigError("method.adapter_layers=[]: give at least one block, or null for every block")
