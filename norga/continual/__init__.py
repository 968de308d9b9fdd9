"""The method-agnostic continual-learning layer: task loop, evaluation, shared training loop, statistics.

Methods (``norga.methods``) plug into it through :class:`norga.methods.base.Method`.
"""
from .gaussian import GaussianStore
from .runner import dry_run, evaluate_run, run_training

__all__ = ["GaussianStore", "dry_run", "evaluate_run", "run_training"]
