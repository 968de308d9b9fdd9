"""The engine, above the methods: the task loop, the run folder and its lock, the run's lifecycle
(resume, integrity, sanity checks), the metrics tracker, evaluation, data loaders and the route report.

It drives any registered method through :class:`norga.methods.base.Method` and never names one.
"""
from .dry_run import dry_run
from .saved_states import evaluate_run
from .task_loop import run_training

__all__ = ["dry_run", "evaluate_run", "run_training"]
