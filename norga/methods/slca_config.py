"""Config section of the ``slca`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from ..config import ConfigError, MethodConfig, _f, method_config
from .hideprompt_config import StatsConfig


@method_config("slca", module="norga.methods.slca")
@dataclass
class SLCAConfig(MethodConfig):
    """SLCA: the whole backbone fine-tuned on every task at a learning rate scaled down from the head's (slow
    learner), one linear head per task; after each task the class-wise Gaussians of the new classes are stored and
    every seen head is re-trained on features sampled from them (classifier alignment).

    Zhang, Wang, Kang, Chen, Wei, "SLCA: Slow Learner with Classifier Alignment for Continual Learning on a
    Pre-trained Model" (ICCV 2023). Defaults: the official code GengDavid/SLCA at 169d4e6 (``models/slca.py``,
    ``models/base.py``, ``convs/linears.py``, ``exps/slca/slca_cifar.json``); docs/methods/slca.md lists every
    source and difference.
    """

    name: str = _f("slca")
    epochs: int = _f(20, ge=0)  # slow-learner epochs per task; slca_cifar.json: 20 (slca_imgnetr.json: 50)
    lr: float = _f(0.01, gt=0.0)  # the heads' SGD lr; models/slca.py:18 lrate = 0.01 (no json overrides it)
    # the backbone's lr = lr x backbone_lr_scale (models/slca.py:48 bcb_lrscale = 1/100); 0 freezes the backbone
    backbone_lr_scale: float = _f(0.01, ge=0.0)
    milestones: List[int] = _f([18])  # MultiStepLR epochs; slca_cifar.json: [18] (slca_imgnetr.json: [40])
    gamma: float = _f(0.1, gt=0.0, le=1.0)  # lr decay at each milestone; models/slca.py:20 lrate_decay = 0.1
    batch_size: int = _f(128, ge=1)  # models/slca.py:21
    weight_decay: float = _f(5e-4, ge=0.0)  # backbone, heads and alignment; models/slca.py:24
    momentum: float = _f(0.9, ge=0.0, le=1.0)  # SGD momentum of both stages; models/slca.py:165, :183
    # class statistics: mean + covariance + ridge I (models/base.py:262: torch.cov + 1e-4 I)
    stats: StatsConfig = field(default_factory=StatsConfig)
    ca_epochs: int = _f(5, ge=0)  # alignment epochs (tasks t > 0); slca_cifar.json: ca_epochs 5; 0: no alignment
    ca_lr: float = _f(0.01, gt=0.0)  # alignment SGD lr, cosine over ca_epochs; models/slca.py:181 (= lrate)
    ca_samples_per_class: int = _f(256, ge=2)  # sampled features per seen class and epoch (and the batch); :197
    # logits divided by the mean over seen tasks of each task's logit L2 norm, then by this temperature
    # (slca_cifar.json: ca_with_logit_norm 0.1); 0: plain cross-entropy (the code's default without the key)
    ca_logit_norm: float = _f(0.1, ge=0.0)
    # mean of a class of task i sampled at s_i x mu, s_i = 1 - m + m (i + 1) / (t + 1) at task t
    # (models/slca.py:201-202, m = 0.1: 0.9 + 0.1 (i + 1) / (t + 1)); 0: the stored mean as it is
    ca_mean_shrink: float = _f(0.1, ge=0.0, le=1.0)
    # restore: the heads go back to their pre-alignment weights after the evaluation of their task, and each
    # alignment starts from the slow learner's heads (models/slca.py:79 fc.recall(), :107 fc.backup()); keep: the
    # aligned heads continue into the next task
    ca_heads: str = _f("restore", choices=("restore", "keep"))

    def __post_init__(self):
        if any(int(m) < 0 for m in self.milestones) or list(self.milestones) != sorted(self.milestones):
            raise ConfigError(f"method.milestones={self.milestones}: give increasing epoch indices >= 0 "
                              "(official CIFAR-100: [18])")
