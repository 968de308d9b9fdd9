"""Config section of the ``hidelora`` method: the HiDe pipeline (TII, WTP, TAP) with one LoRA per task in place of
the prefix prompt (torch-free; read before torch loads).

Wang et al., "HiDe-PET: Continual Learning via Hierarchical Decomposition of Parameter-Efficient Tuning"
(arXiv 2407.05229); reference code ivcylc/HiDe-PET at 131f7ce (configs/imr_hidelora.py, trainers/hidelora_trainer.py,
engines/hide_lora_wtp_and_tap_engine.py, peft/lora/hide_lora.py, vits/hide_lora_vision_transformer.py and the
README's HiDe-LoRA command). The ``stats``, ``tii`` and ``tap`` sections are HiDe-Prompt's
(:mod:`.hideprompt_config`). docs/methods/hidelora.md lists every difference from the reference and its option.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config, stepping_field
from .hideprompt_config import StatsConfig, TAPConfig, TIIConfig

LORA_INITS = ("reference", "linear")


@dataclass
class LoRAStatsConfig(StatsConfig):
    """HiDe-Prompt's statistics section with the reference's default kind (--ca_storage_efficient_method)."""

    kind: str = _f("multi_centroid", choices=("covariance", "variance", "multi_centroid"))  # reference default


@dataclass
class LoRATAPConfig(TAPConfig):
    """HiDe-Prompt's TAP section with the reference's values (engines/hide_lora_wtp_and_tap_engine.py)."""

    epochs: int = _f(30, ge=0)  # README: --crct_epochs 30
    lr: float = _f(0.005, gt=0.0)  # README: --ca_lr 0.005 (SGD momentum 0.9, cosine; never scaled)
    batch_size: int = _f(120, ge=1)  # 5 x the training batch (num_sampled_pcls = batch_size * 5)
    samples_per_class: int = _f(120, ge=1)  # 5 x the training batch (the reference: per centroid)


@dataclass
class LoRAWTPConfig:
    """Within-task prediction: task t's LoRA and the classifier psi, CE on the task's classes + reg * regulariser."""

    epochs: int = _f(50, ge=0)  # epochs of task t's LoRA and psi (Adam); reference README: --epochs 50
    lr: float = _f(0.01, gt=0.0)  # LoRA and psi lr, x batch/256 under scale_lr_by_batch; README: --lr 0.01
    batch_size: int = _f(24, ge=1)  # training batch; reference configs: --batch-size 24
    schedule: str = _f("cosine", choices=("constant", "step", "cosine"))  # README: --sched cosine
    warmup_epochs: int = _f(5, ge=0)  # timm warm-up epochs of the schedule; reference configs: --warmup-epochs 5
    warmup_lr: float = _f(1e-6, ge=0.0)  # lr of the first warm-up epoch (timm warmup_lr_init); reference: 1e-6
    milestones: List[int] = _f([15])  # decays of the step schedule (reference configs: --milestones 15, unused there)
    gamma: float = _f(0.1, gt=0.0)  # factor of the step schedule
    min_lr: float = _f(1e-5, ge=0.0)  # floor of the cosine schedule (timm lr_min); reference: --min-lr 1e-5
    # timm: scheduler.step(e) after epoch e sets epoch e + 1's lr (reference); torch: f(e) during epoch e
    schedule_stepping: str = stepping_field("timm")
    head_lr_scale: float = _f(1.0, gt=0.0)  # psi's lr / the LoRA's lr; reference: one Adam group for both (1.0)
    reg: float = _f(0.001, ge=0.0)  # lambda of the contrastive regulariser; README: --reg 0.001 (config default 0.01)
    # official: CE(M M^T / temperature, identity), M = [old prototypes; batch features], every task (the reference's
    # orth_loss); eq56: HiDe-Prompt's paper form on L2-normalised features, tasks t > 0
    reg_form: str = _f("official", choices=("official", "eq56"))
    temperature: float = _f(0.8, gt=0.0)  # the reference's orth_loss divides by 0.8
    # centroids: every stored centroid of every old class (the reference under its multi-centroid statistics);
    # means: one mean per old class (HiDe-Prompt's pipeline; the same rows under stats.kind covariance or variance)
    prototypes: str = _f("centroids", choices=("centroids", "means"))
    # after WTP of task t > 0: A_t <- (1 - m) A_t + m mean(A_<t), and the same for B_t (the reference's
    # lora_momentum, on the two factors separately); 0: off. README: --lora_momentum 0.1
    momentum: float = _f(0.1, ge=0.0, le=1.0)
    init_from_previous: bool = _f(True)  # task t > 0 starts from task t-1's A and B (reference); false: fresh
    grad_clip: Optional[float] = _f(2.0, gt=0.0)  # max gradient norm of LoRA + psi; reference: --clip-grad 2.0


@dataclass
class ContinualLoRAConfig:
    """The reference's TII model (``tii_model: continual_lora``): a shared LoRA and a linear head trained on every
    task, its classifier aligned. Values: configs/imr_continual_lora.py and the README's ``imr_continual_lora``
    command of ivcylc/HiDe-PET (131f7ce), engines/continual_pet_engine.py, trainers/continual_lora_trainer.py."""

    rank: int = _f(5, ge=1)  # r of the shared LoRA (scale alpha / r); README: --lora_rank 5
    epochs: int = _f(50, ge=0)  # epochs per task (Adam, constant lr); README: --epochs 50
    lr: float = _f(0.03, gt=0.0)  # head lr, x batch/256 under scale_lr_by_batch (batch: wtp.batch_size); README
    slow_lr: float = _f(0.1, gt=0.0)  # the LoRA's lr / the head's; README: --slow_lr 0.1
    # README: --continual_type first_sl (task 0's LoRA at the head's lr, later tasks slow); slow_learner: every task
    slow_first_task: bool = _f(False)
    grad_clip: Optional[float] = _f(2.0, gt=0.0)  # max norm of LoRA + head gradients; config: --clip-grad 2.0
    align_epochs: int = _f(30, ge=0)  # classifier alignment after tasks t > 0; config: --crct_epochs 30
    align_lr: float = _f(0.005, gt=0.0)  # SGD momentum 0.9, cosine, never scaled; README: --ca_lr 0.005
    align_batch_size: int = _f(120, ge=1)  # num_sampled_pcls = 5 x --batch-size 24
    samples_per_class: int = _f(120, ge=1)  # pseudo-features per class and epoch (the reference: per centroid)
    align_batches: str = _f("old_classes", choices=("old_classes", "all"))  # reference: C_old batches per epoch


@method_config("hidelora", module="norga.methods.hidelora")
@dataclass
class HiDeLoRAConfig(MethodConfig):
    """HiDe-LoRA: TII on frozen features, WTP with a LoRA per task on the keys and values of the first blocks,
    TAP on Gaussian statistics of the LoRA-tuned features; at test time the inferred task's LoRA is used."""

    name: str = _f("hidelora")
    lora_layers: List[int] = _f([0, 1, 2, 3, 4])  # blocks whose qkv gets LoRA; reference: lora_depth=5 (blocks 0-4)
    # projections with LoRA; reference HideLoraPool: k and v (its q factors are zero tensors)
    lora_targets: List[str] = _f(["k", "v"])
    rank: int = _f(5, ge=1)  # r; README: --lora_rank 5 (config default 4)
    alpha: float = _f(1.0, gt=0.0)  # the update is (alpha / rank) x A B; reference: lora_alpha=1
    # reference: A ~ kaiming_uniform(a=sqrt(5)) of a (D, r) tensor = U(-1/sqrt(r), 1/sqrt(r)); linear: U(-1/sqrt(D),
    # 1/sqrt(D)), nn.Linear's (peft's) bound; B = 0 either way. Only task 0's A (later tasks copy the previous)
    lora_init: str = _f("reference", choices=LORA_INITS)
    scale_lr_by_batch: bool = _f(True)  # TII, TII-alignment and WTP lr x batch / 256 (reference: unscale_lr=True)
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))  # linear layers of both heads
    stats: LoRAStatsConfig = field(default_factory=LoRAStatsConfig)
    # task-identity inference: frozen_head (HiDe-Prompt's TII stage on frozen features, ``tii.*``; the pipeline of
    # HiDe-Prompt, shipped); continual_lora (the reference's --trained_original_model run, ``continual_lora.*``)
    tii_model: str = _f("frozen_head", choices=("frozen_head", "continual_lora"))
    tii: TIIConfig = field(default_factory=TIIConfig)
    continual_lora: ContinualLoRAConfig = field(default_factory=ContinualLoRAConfig)
    wtp: LoRAWTPConfig = field(default_factory=LoRAWTPConfig)
    tap: LoRATAPConfig = field(default_factory=LoRATAPConfig)

    def __post_init__(self):
        unknown = [t for t in self.lora_targets if t not in ("q", "k", "v")]
        if unknown or not self.lora_targets or len(set(self.lora_targets)) != len(self.lora_targets):
            raise ConfigError(f"method.lora_targets={self.lora_targets}: give distinct projections among q, k, v "
                              "(reference: [k, v])")
        if not self.lora_layers:
            raise ConfigError("method.lora_layers is empty: HiDe-LoRA needs at least one block with LoRA "
                              "(reference: [0, 1, 2, 3, 4])")
        if self.tap.after_first_task and self.tap.batches == "old_classes":
            raise ConfigError("method.tap.after_first_task=true with method.tap.batches=old_classes would run 0 TAP "
                              "batches after the first task (C_old = 0); set method.tap.batches=all, or "
                              "method.tap.after_first_task=false")
