"""Config sections of ``hideprompt`` and ``norga``: the HiDe-Prompt pipeline (WTP, TII, TAP) with a prefix gate.

``method: {name: hideprompt}`` is HiDe-Prompt: prefix tuning with the ``linear`` gate (the only gate it
takes). ``method: {name: norga}`` is NoRGa: the same pipeline with the non-linear residual gate
(``gate: {name: norga, activation: tanh | sigmoid | gelu}``, tanh by default), or any other registered
gate (e.g. ``norga_headwise``, or ``linear`` for a paired control). Torch-free (read before torch loads).
Every field is listed in README "Config reference"; docs/fidelity.md says which
values reproduce the authors' code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import ConfigError, MethodConfig, _f, method_config, stepping_field
from ..gates.schema import gate_section


@dataclass
class StatsConfig:
    # per-class Gaussians: full covariance, diagonal variance, or several centroids
    kind: str = _f("covariance", choices=("covariance", "variance", "multi_centroid"))
    ridge: float = _f(1e-4, ge=0.0)  # added to the covariance diagonal (authors: 1e-4)
    n_centroids: int = _f(10, ge=1)  # centroids per class of kind multi_centroid
    # multi_centroid sampling: by_weight (each sample's cluster drawn by its share); per_centroid (the HiDe codes:
    # samples_per_class from every cluster of nonzero variance)
    centroid_sampling: str = _f("by_weight", choices=("by_weight", "per_centroid"))


@dataclass
class TIIConfig:
    epochs: int = _f(20, ge=0)  # stage 1: epochs of the task-identity head (Adam)
    lr: float = _f(0.0005, gt=0.0)  # TII learning rate (x batch/256 under scale_lr_by_batch)
    batch_size: int = _f(128, ge=1)  # TII batch (also the alignment batch)
    mlp_ratios: List[int] = _f([2])  # hidden widths of the TII head's MLP as multiples of D
    align_epochs: int = _f(30, ge=0)  # eq. 59 alignment of the TII head on uninstructed pseudo-features (tasks t > 0)
    align_lr: float = _f(0.005, gt=0.0)  # alignment lr (SGD momentum 0.9, cosine)
    samples_per_class: int = _f(128, ge=1)  # pseudo-features per seen class and alignment epoch
    align_batches: str = _f("old_classes", choices=("old_classes", "all"))  # batches per alignment epoch
    scale_align_lr: bool = _f(True)  # align_lr * batch / 256 too (authors' code), when scale_lr_by_batch
    # official: the authors' single post-LN residual block over mlp_ratios; pre_norm: a pre-LN block per ratio
    mlp_style: str = _f("official", choices=("official", "pre_norm"))
    grad_clip: Optional[float] = _f(1.0, gt=0.0)  # max grad norm in TII training (authors: 1.0)
    cache_features: bool = _f(False)  # train on frozen features of un-augmented images, computed once


@dataclass
class WTPConfig:
    epochs: int = _f(50, ge=0)  # stage 2: epochs of the task's prompt and the classifier head (Adam)
    lr: float = _f(0.03, gt=0.0)  # prompt (and task-0 gate) lr, x batch/256 under scale_lr_by_batch
    batch_size: int = _f(128, ge=1)  # training batch of WTP (the augmented loader's)
    schedule: str = _f("step", choices=("constant", "step", "cosine"))  # lr schedule over the WTP epochs
    milestones: List[int] = _f([30])  # epochs of the step schedule's decays
    gamma: float = _f(0.1, gt=0.0)  # the step schedule's factor
    min_lr: float = _f(1e-5, ge=0.0)  # floor of the cosine schedule (timm's lr_min in the authors' scripts)
    # timm: scheduler.step(epoch) after each epoch sets the next epoch's lr from the finished epoch's index, so a
    # change "at epoch 30" first applies to 0-based epoch 31 (authors); torch: it applies to epoch 30
    schedule_stepping: str = stepping_field("timm")
    head_lr_scale: float = _f(0.1, gt=0.0)  # "larger prompt lr": head gets head_lr_scale * lr
    reg: float = _f(0.1, ge=0.0)  # lambda of the contrastive regulariser
    # official: CE(M M^T / temperature, identity) on M = [old class means; batch features], every task (authors'
    # code); eq56: the paper's eq. 56 on L2-normalised features, tasks t > 0 only
    reg_form: str = _f("official", choices=("official", "eq56"))
    temperature: float = _f(0.8, gt=0.0)  # tau of the contrastive regulariser
    momentum: float = _f(0.01, ge=0.0, le=1.0)  # prompt-ensemble m
    grad_clip: Optional[float] = _f(1.0, gt=0.0)  # max gradient norm in WTP (null: off; authors 1.0, 5-Datasets 2.0)
    label_smoothing: float = _f(0.0, ge=0.0, le=1.0)  # authors' code: none (the flag is parsed, never used)
    prompt_writeback: bool = _f(True)  # after WTP store p_t (ensembled) as e_t (authors); false: keep raw e_t


@dataclass
class TAPConfig:
    epochs: int = _f(80, ge=0)  # eq. 58 alignment of the classifier head on instructed pseudo-features
    lr: float = _f(0.05, gt=0.0)  # TAP lr (SGD momentum 0.9, cosine; never scaled by the batch)
    batch_size: int = _f(640, ge=1)  # authors: 5 x the training batch
    samples_per_class: int = _f(640, ge=1)  # authors: 5 x the training batch
    batches: str = _f("old_classes", choices=("old_classes", "all"))  # batches per epoch (see tii.align_batches)
    after_first_task: bool = _f(False)  # authors' code runs TAP only for tasks t > 0


HIDEPROMPT_GATE = {"name": "linear"}
NORGA_GATE = {"name": "norga", "activation": "tanh"}


PROMPT_INITS = ("uniform", "normal", "zero_values")  # norga.models.prompts.PromptPool implements each


@method_config("hideprompt", module="norga.methods.hideprompt")
@dataclass
class HiDePromptConfig(MethodConfig):
    """HiDe-Prompt (WTP, TII, TAP): prefix tuning with the linear gate (NoRGa is ``method.name: norga``).

    ``gate`` is ``{name: <registered gate>, <that gate's options>}``;
    its options are checked against the gate's ``Options`` when the config is read (``norga list`` shows them)."""

    name: str = _f("hideprompt")
    prompt_layers: List[int] = _f([0, 1, 2, 3, 4])  # blocks that get prefix prompts
    prompt_length: int = _f(5, ge=0)  # 0: no prompts (frozen-backbone reference with the same TII/TAP)
    gate: Dict[str, Any] = _f(HIDEPROMPT_GATE)  # the prefix gate {name, options}: hideprompt takes {name: linear} only
    scale_lr_by_batch: bool = _f(True)  # TII, TII-alignment (see tii.scale_align_lr) and WTP lr * batch / 256
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))  # linear layers of both heads
    # the first task's prompt before WTP (later tasks start from the previous prompt): uniform U(-s, s) (authors:
    # s = 1), normal N(0, s^2), or zero_values (keys U(-s, s), values 0); s = prompt_init_scale (issue #33's factor)
    prompt_init: str = _f("uniform", choices=PROMPT_INITS)
    prompt_init_scale: float = _f(1.0, gt=0.0)  # s of prompt_init (authors: U(-1, 1), s = 1)
    # per-task evidence that WTP, the prompt and the gate did work (norga.methods.hideprompt_diagnostics); changes
    # no other number; off by default: three feature passes and a linear probe per task (~8% of a small run)
    diagnostics: bool = _f(False)
    stats: StatsConfig = field(default_factory=StatsConfig)
    tii: TIIConfig = field(default_factory=TIIConfig)
    wtp: WTPConfig = field(default_factory=WTPConfig)
    tap: TAPConfig = field(default_factory=TAPConfig)

    def __post_init__(self):
        self.gate = gate_section(self.gate, self.default_gate()["name"])
        self.check_gate()
        if self.tap.after_first_task and self.tap.batches == "old_classes":
            raise ConfigError("method.tap.after_first_task=true with method.tap.batches=old_classes would run 0 TAP "
                              "batches after the first task (C_old = 0); set method.tap.batches=all, or "
                              "method.tap.after_first_task=false")

    @staticmethod
    def default_gate() -> Dict[str, Any]:
        return dict(HIDEPROMPT_GATE)

    def check_gate(self) -> None:
        """HiDe-Prompt is the linear gate: any other gate is NoRGa's pipeline, named ``norga``."""
        if self.gate["name"] != "linear":
            raise ConfigError(f"method.gate.name: {self.gate['name']!r} under method.name: hideprompt; hideprompt is "
                              "HiDe-Prompt with the linear gate only: for this gate set method.name: norga (the same "
                              "pipeline with a gate, e.g. method: {name: norga, gate: {name: norga, activation: "
                              "tanh}})")

    def report(self, cfg) -> str:
        from ..config.fidelity import fidelity_report  # torch-free

        return fidelity_report(cfg)


@method_config("norga", module="norga.methods.hideprompt")
@dataclass
class NoRGaConfig(HiDePromptConfig):
    """NoRGa: the HiDe-Prompt pipeline with the non-linear residual gate s + alpha * act(tau * s) (tanh default).

    Every option of ``hideprompt`` applies; ``gate`` may be any registered gate (``linear`` makes it a paired
    HiDe-Prompt control)."""

    name: str = _f("norga")
    gate: Dict[str, Any] = _f(NORGA_GATE)  # the prefix gate {name, options}: any registered gate (Gates below)

    @staticmethod
    def default_gate() -> Dict[str, Any]:
        return dict(NORGA_GATE)

    def check_gate(self) -> None:
        """Any registered gate (its name and options were checked when the section was read: norga.gates.schema)."""
