"""The pre-registered grid of ``studies.task_ablation.run`` (issue #33): its levels, the factor each level belongs to,
and the combination of levels the decision rule may pick.

A *level* maps the regime's base config (its ``norga_tanh`` arm) to the ``--set`` overrides that change one
factor; ``base`` changes nothing. Levels were fixed on 2026-11-25, before any cell ran; the grouping into
:data:`FACTORS` (which the rule's "per factor" reads) was written out on 2026-11-27, still before any cell ran.
"""
from __future__ import annotations

import copy
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

from norga.config import Config

Level = Callable[[Config], List[str]]  # the base config -> the level's --set overrides
BASE = "base"
COMBINATION = "combination"  # the rule's pick of one level per factor, run on fresh seeds


def _scaled(key: str, factor: float, cast=float) -> Level:
    """``key`` (a ``method.`` path) times ``factor`` (cast, e.g. epochs to int)."""
    def level(cfg: Config) -> List[str]:
        value = cfg.method
        for part in key.split(".")[1:]:
            value = getattr(value, part)
        return [f"{key}={cast(value * factor)}"]
    return level


def _swap_transforms(cfg: Config) -> List[str]:
    """Augmentation on <-> off: ``plain`` -> ``backbone`` (timm's training transform: RandomResizedCrop(0.08-1) and
    flip, the authors' recipe outside CIFAR), any augmenting recipe (e.g. the authors' ``cifar``) -> ``plain``."""
    return [f"data.transforms={'backbone' if cfg.data.transforms == 'plain' else 'plain'}"]


def _all_blocks(cfg: Config) -> List[str]:
    return [f"method.prompt_layers={list(range(_depth(cfg)))}"]


def _depth(cfg: Config) -> int:
    """Number of blocks of the config's backbone (builds it without weights)."""
    from norga.engine.task_loop import build_vit

    arch = copy.deepcopy(cfg)
    arch.model.checkpoint, arch.model.pretrained = None, False
    return len(build_vit(arch).blocks)


LEVELS: Dict[str, Level] = {
    BASE: lambda cfg: [],
    "init_small": lambda cfg: ["method.prompt_init=uniform", "method.prompt_init_scale=0.01"],
    "init_normal": lambda cfg: ["method.prompt_init=normal", "method.prompt_init_scale=0.02"],
    "init_zero_values": lambda cfg: ["method.prompt_init=zero_values"],
    "reg_eq56": lambda cfg: ["method.wtp.reg_form=eq56"],
    "reg_off": lambda cfg: ["method.wtp.reg=0.0"],
    "aug_swap": _swap_transforms,
    "lr_x0.1": _scaled("method.wtp.lr", 0.1),
    "lr_x10": _scaled("method.wtp.lr", 10.0),
    "epochs_x0.5": _scaled("method.wtp.epochs", 0.5, lambda v: max(1, int(round(v)))),
    "epochs_x2": _scaled("method.wtp.epochs", 2.0, lambda v: int(round(v))),
    "layers_all": _all_blocks,
    "length_x2": _scaled("method.prompt_length", 2.0, lambda v: int(round(v))),
    "gate_linear": lambda cfg: ["method.gate={name: linear}"],
    "gate_sigmoid": lambda cfg: ["method.gate={name: norga, activation: sigmoid}"],
    "head_lr_x0.1": _scaled("method.wtp.head_lr_scale", 0.1),
    "head_lr_x10": _scaled("method.wtp.head_lr_scale", 10.0),
}

# Factor -> its levels other than base (every such level in exactly one factor; tests/test_ablation_rule.py here).
FACTORS: Dict[str, Tuple[str, ...]] = {
    "prompt init": ("init_small", "init_normal", "init_zero_values"),
    "regulariser": ("reg_eq56", "reg_off"),
    "augmentation": ("aug_swap",),
    "prompt lr": ("lr_x0.1", "lr_x10"),
    "WTP epochs": ("epochs_x0.5", "epochs_x2"),
    "placement": ("layers_all",),
    "prefix length": ("length_x2",),
    "gate": ("gate_linear", "gate_sigmoid"),
    "head lr": ("head_lr_x0.1", "head_lr_x10"),
}


def factor_of(level: str) -> str:
    return next(f for f, levels in FACTORS.items() if level in levels)


def combined_overrides(cfg: Config, levels: Sequence[str]) -> List[str]:
    """The overrides of several levels of different factors at once (each level's overrides read from ``cfg``,
    the base; no two levels may share a factor or a key). ``[]``: the base itself."""
    factors = [factor_of(level) for level in levels]
    if len(set(factors)) != len(factors):
        raise ValueError(f"a combination takes one level per factor; got {list(levels)}")
    out: List[str] = []
    for level in levels:
        out += LEVELS[level](cfg)
    keys = [o.split("=", 1)[0] for o in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"levels {list(levels)} set the same key twice: {keys}")
    return out


def combination_levels(choice: Mapping[str, str]) -> List[str]:
    """The levels of a rule's choice (factor -> level or base) other than base, in FACTORS' order."""
    return [choice[f] for f in FACTORS if choice.get(f, BASE) != BASE]
