"""The HiDe-Prompt + NoRGa continual-learning pipeline: stages, statistics, task loop."""
from .gaussian import GaussianStore
from .learner import HiDeNoRGaLearner, TaskLoaders
from .runner import dry_run, evaluate_run, run_training

__all__ = ["GaussianStore", "HiDeNoRGaLearner", "TaskLoaders", "dry_run", "evaluate_run", "run_training"]
