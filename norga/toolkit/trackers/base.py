"""The tracker interface and its registry (see :mod:`norga.toolkit.trackers`)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, Optional, Type

TRACKERS: Dict[str, Type["Tracker"]] = {}


def register_tracker(cls: Type["Tracker"]) -> Type["Tracker"]:
    """Class decorator: make ``cls`` selectable as ``logging.trackers: [cls.name]``."""
    TRACKERS[cls.name] = cls
    return cls


class Tracker:
    """One experiment tracker. ``run_dir``: the run folder; ``config``: the resolved config (a dict);
    ``resume``: what :meth:`state` returned in an earlier session of this run ({} for a new run)."""

    name = ""
    package = ""  # the import name whose absence makes the tracker unusable
    extra = ""  # the norga extra installing it
    where: Optional[str] = None  # set by __init__: one line for the run's log saying where the tracker writes

    def __init__(self, run_dir: Path, config: dict, resume: dict):
        self.run_dir = run_dir

    @classmethod
    def problem(cls) -> Optional[str]:
        """None when usable, else one sentence naming the fix (checked before training starts)."""
        if cls.package and importlib.util.find_spec(cls.package) is None:
            return (f"the {cls.package!r} package is not installed: pip install {cls.package} "
                    f"(or pip install \"norga[{cls.extra}]\"), or remove {cls.name} from logging.trackers")
        return None

    def state(self) -> dict:
        """What resuming needs (e.g. the tracker's run id), kept in ``trackers.json``."""
        return {}

    def scalars(self, values: Dict[str, float], step: int) -> None:
        """Log scalar ``values`` (tag -> float) at ``step``."""
        raise NotImplementedError

    def finish(self, final: Dict[str, float], status: str) -> None:
        """Log the final FA/CA/FM (``final``, may be empty) and the run's ``status``; then close."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the tracker without a final status (e.g. after :meth:`finish` was not reached)."""
