"""Config section of the ``mos`` method (torch-free; read before torch loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..config import ConfigError, _f, method_config
from .adapter_config import AdapterTuningConfig

MERGES = ("per_block", "per_step")  # when the adapter EMA runs (docs/methods/mos.md)
TEST_ADAPTERS = ("prefix_mean", "stored")  # which weights adapter k has at test
STATS_ADAPTERS = ("merging", "trained")  # which adapter the class statistics' forwards run
STATISTICS = ("covariance", "variance", "multi_centroid")  # norga.toolkit.gaussian.GaussianStore kinds


@method_config("mos", module="norga.methods.mos")
@dataclass
class MOSConfig(AdapterTuningConfig):
    """MOS: one bottleneck adapter set trained per task and merged towards the mean of the earlier tasks' adapters
    (EMA), an orthogonality-style contrastive regulariser, a linear head re-aligned on Gaussian class statistics,
    and self-refined adapter retrieval at test (the prediction picks the adapter, repeated until it settles).

    Sun, Zhou, Ye, Zhan, "MOS: Model Surgery for Pre-Trained Model-Based Class-Incremental Learning" (AAAI 2025).
    Defaults: sun-hailong/AAAI25-MOS at 8d5e07c (``exps/mos_cifar_in21k.json``, ``models/mos.py``,
    ``backbone/vit_mos.py``, ``utils/inc_net.py``); docs/methods/mos.md lists every source and difference.
    """

    name: str = _f("mos")
    adapter_layers: Optional[List[int]] = _f(None)  # blocks that get adapters; null: every block (official)
    bottleneck: int = _f(16, ge=1)  # adapter width r; official ffn_num: 16
    lr: float = _f(0.03, gt=0.0)  # SGD lr of the adapters; official init_lr 0.03 (ImageNet-R: 0.05)
    head_lr_factor: float = _f(0.1, gt=0.0)  # the head trains at lr x this; official get_optimizer: init_lr * 0.1
    adapter_momentum: float = _f(0.1, ge=0.0, le=1.0)  # EMA weight beta of the earlier adapters' mean; official 0.1
    # per_block (official): the training forward merges the current adapters once before every adapted block (so
    # depth merges per forward, also while the statistics are computed) and once after every optimiser step;
    # per_step (the paper's eq.): one merge after every optimiser step only
    merge: str = _f("per_block", choices=MERGES)
    # prefix_mean (official): adapter k > 0 at test is the mean of the adapters saved after tasks 0..k-1, the
    # fixed point the official code reaches by re-merging the saved adapters in place at every test forward;
    # stored (the paper): adapter k is the one saved after task k
    test_adapters: str = _f("prefix_mean", choices=TEST_ADAPTERS)
    # merging (official _compute_mean): the statistics' forwards are training forwards of the trained adapter, class
    # by class in batches of 3 x batch_size; under merge: per_block each merges it towards the mean of the earlier
    # tasks' saved adapters before every block, so after the first batches the statistics are those of that mean
    # (the test adapter under prefix_mean) and the next task starts from it; trained: the adapter as trained
    stats_adapter: str = _f("merging", choices=STATS_ADAPTERS)
    # true (official replace_fc): after every task but the first the alignment has left the backbone in train mode,
    # so the new classes' prototypes are means of adapter-0 features with its dropout on; false: dropout off
    prototype_dropout: bool = _f(True)
    reg: float = _f(0.1, ge=0.0)  # weight of the contrastive regulariser; official reg: 0.1
    reg_temperature: float = _f(0.8, gt=0.0)  # its similarity divisor; official orth_loss: / 0.8
    # true (official ensemble): softmax of the refined head logits + softmax(T x prototype cosine logits of adapter
    # 0), T = tasks learned; false: the refined head logits alone
    ensemble: bool = _f(True)
    refine_steps: int = _f(4, ge=1)  # head evaluations of the self-refined retrieval at most; official MAX_ITER: 4
    ca_epochs: int = _f(30, ge=0)  # classifier alignment epochs after every task but the first; official 30
    ca_lr: float = _f(0.005, gt=0.0)  # its SGD lr (momentum 0.9, cosine to 0, weight_decay); official ca_lr
    # pseudo-features per class and epoch, also the alignment batch size; official num_sampled_pcls = batch_size * 5
    ca_samples_per_class: int = _f(240, ge=1)
    ca_statistics: str = _f("covariance", choices=STATISTICS)  # official ca_storage_efficient_method: covariance
    ca_ridge: float = _f(1e-4, ge=0.0)  # added to the covariance diagonal; official _compute_mean: 1e-4
    n_centroids: int = _f(10, ge=1)  # clusters per class under multi_centroid; official n_centroids: 10

    def __post_init__(self):
        super().__post_init__()
        if self.adapter_layers is not None and not self.adapter_layers:
            raise ConfigError("method.adapter_layers=[]: give at least one block, or null for every block")
