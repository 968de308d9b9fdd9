"""What the configs of the first-task tunings share (APER's ``method``, RanPAC's ``method.first_session``): the
names of the tunings and the checks of their SGD options (torch-free; read before torch loads).

The tunings themselves are attached by :func:`norga.methods.adapter_stage.attach_tuning`, one entry per name.
"""
from __future__ import annotations

from ..config import ConfigError

TUNINGS = ("adapter", "vpt_deep", "ssf")  # parallel bottleneck adapters, VPT-deep prompts, SSF (models/adapters.py)


def check_tuning_options(opts, prefix: str) -> None:
    """Raise a ConfigError naming ``prefix.<key>`` when ``opts`` (momentum, lr, min_lr, tuned_layers) cannot run:
    momentum >= 1, a cosine floor above the lr, or an empty list of tuned blocks."""
    if not float(opts.momentum) < 1.0:
        raise ConfigError(f"{prefix}.momentum={opts.momentum}: SGD momentum must be below 1; official: 0.9")
    if float(opts.min_lr) > float(opts.lr):
        raise ConfigError(f"{prefix}.min_lr={opts.min_lr} exceeds {prefix}.lr={opts.lr}: the cosine decays from lr "
                          "down to min_lr; set min_lr <= lr (official: 0)")
    if opts.tuned_layers is not None and not opts.tuned_layers:
        raise ConfigError(f"{prefix}.tuned_layers=[]: tune at least one block, or null for every block")
