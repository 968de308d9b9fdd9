"""``norga tune``: hyperparameter search with Optuna on protocols that keep the evaluation data out of tuning.

spec.py (the spec file, checked with the config's own checks), protocols.py (heldout, first_task, oracle;
registered by name), trial.py (one trial = normal run folders, reporting after every task for pruning), study.py
(storage, sampler, pruner, budget, stale trials), folder.py (the tune folder), report.py (trial table, best
config, plots), final.py (the fresh-seed evaluation), run.py (the command and its workers). docs/tuning.md.
Optuna is imported only when a study is opened (``pip install norga[tune]``).
"""
from .protocols import PROTOCOLS, register_protocol
from .run import TuneRequest, run_tune
from .spec import TuneSpec, read_spec

__all__ = ["PROTOCOLS", "TuneRequest", "TuneSpec", "read_spec", "register_protocol", "run_tune"]
