"""Which config trained each task of a run folder, and when a changed config may continue a run.

Every checkpoint carries the resolved config that trained its task (:func:`norga.engine.lifecycle.attach_evaluation`).
From them ``metrics.json`` records the run's *config history* (:func:`config_history`): one entry per stretch of
tasks trained with the same config, its hash (:func:`config_hash`) and, from the second entry on, the keys that
changed with their old and new values. A run trained with one config has one entry and ``mixed_config: false``.

Continuing a run with another config (:func:`check_run_config`):

* a change only in sections that cannot affect what a task learns (:data:`RESULT_NEUTRAL_SECTIONS`) is accepted;
* any other change is refused unless ``--force``; with ``--force`` the remaining tasks train with the new config,
  the change is written to ``log.txt`` and to ``metrics.json`` (``mixed_config: true``), and ``norga summarize``
  refuses to pool the run unless ``--allow-mixed``;
* a finished run with another config is refused even with ``--force``: there is no task left to apply it to.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional

from ..config import MOVED_KEYS, Config, ConfigError, config_to_dict, from_dict
from ..errors import RunError
from .run_folder import RunDir

RESULT_NEUTRAL_SECTIONS = ("logging",)  # top-level config sections that change no number of a run


class RunConfigMismatch(RunError):
    """The output folder holds a run with another config (use --force to continue anyway)."""


def config_hash(resolved: dict) -> str:
    """First 12 hex digits of the sha256 of the resolved config without its neutral sections (canonical JSON)."""
    kept = {k: v for k, v in resolved.items() if k not in RESULT_NEUTRAL_SECTIONS}
    text = json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def with_new_defaults(previous: dict) -> dict:
    """``previous`` with keys added to norga since that run was written filled with their defaults.

    A new config key's default keeps the behaviour of the versions without it, so a run written before the key
    existed continues without ``--force``. A stored config this version cannot read (a removed key, an invalid
    value) is returned unchanged and so reported as a change.
    """
    try:
        return config_to_dict(from_dict(Config, previous, ""))
    except (ConfigError, TypeError):
        return previous


def changed_values(old: dict, new: dict, prefix: str = "") -> Dict[str, List[Any]]:
    """Dotted key -> [old value, new value] for every leaf that differs (a missing key reads as None)."""
    changes: Dict[str, List[Any]] = {}
    for key in sorted(set(old) | set(new), key=str):
        path = f"{prefix}.{key}" if prefix else str(key)
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes.update(changed_values(a, b, path))
        elif a != b:
            changes[path] = [a, b]
    return changes


def affects_results(key: str) -> bool:
    """Whether a change of the dotted config ``key`` can change what a task learns or scores."""
    return key.split(".")[0] not in RESULT_NEUTRAL_SECTIONS


def check_run_config(resolved: dict, previous: Optional[dict], run: RunDir, done: int, num_tasks: int,
                     force: bool) -> Dict[str, list]:
    """The changes (key -> [old, new]) with which the run continues; refuses what must not continue (module doc).

    ``resolved``: the new resolved config (config_to_dict); ``previous``: the config the last intact checkpoint
    was trained with (the record; config.yaml is its copy); ``done``: intact saved tasks. Writes nothing.
    """
    if previous is None or done == 0:
        return {}
    old_layout = sorted(k for k in previous if k in MOVED_KEYS)
    if old_layout:
        raise RunError(f"{run.root} holds a run of norga 0.1 (old config layout: {old_layout} at the top level); "
                       "this version cannot continue it: finish it with norga 0.1, or use a new --output-dir")
    changes = changed_values(with_new_defaults(previous), resolved)
    relevant = sorted(k for k in changes if affects_results(k))
    if not relevant:
        return changes
    if done >= num_tasks:
        raise RunError(f"{run.root}: all {num_tasks} tasks are already trained with another config (changed: "
                       f"{relevant}); nothing was retrained, --force cannot apply a config to finished tasks: to "
                       "train with the new config use a new --output-dir")
    if not force:
        raise RunConfigMismatch(
            f"{run.root} holds a run with a different config (changed: {relevant}); use another --output-dir, or "
            f"--force to train {_tasks(done, num_tasks - 1)} with the new config (the run is then marked "
            "mixed_config in metrics.json)")
    return changes


def change_line(changes: Dict[str, list], done: int) -> str:
    """The log line of a forced config change before task ``done``."""
    listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in sorted(changes.items()))
    return (f"warning: --force: {_tasks(0, done - 1)} trained with the previous config, from task {done} on the "
            f"new one trains ({listed}); metrics.json records the history (mixed_config: true)")


def _tasks(first: int, last: int) -> str:
    return f"task {first}" if first == last else f"tasks {first}-{last}"


def history_note(history: List[dict]) -> Optional[str]:
    """A comment for config.yaml when its tasks were not all trained with it (None for a one-config run)."""
    if len(history) < 2:
        return None
    earlier = history[-1]["tasks"][0] - 1
    return (f"{_tasks(0, earlier)} of this run were trained with other configs (norga train --force); this "
            "file is the config of the last tasks; see config_history in metrics.json")


def task_config_hash(saved_config: Optional[dict]) -> Optional[str]:
    """The hash of a checkpoint's stored config (new keys filled with their defaults); None if it has none."""
    return None if saved_config is None else config_hash(with_new_defaults(saved_config))


def config_history(configs: List[Optional[dict]]) -> List[dict]:
    """Per stretch of consecutive tasks with the same config hash: ``{"tasks": [first, last], "config_hash": h}``,
    plus ``"changed": {key: [old, new]}`` against the previous stretch (neutral sections left out).

    ``configs``: the resolved config of each saved task 0, 1, ... (None where a checkpoint carries none)."""
    history: List[dict] = []
    previous: Optional[dict] = None
    for task, cfg in enumerate(configs):
        digest = task_config_hash(cfg)
        if history and history[-1]["config_hash"] == digest:
            history[-1]["tasks"][1] = task
            continue
        entry = {"tasks": [task, task], "config_hash": digest}
        if history:
            changes = changed_values(with_new_defaults(previous or {}), with_new_defaults(cfg or {}))
            entry["changed"] = {k: v for k, v in changes.items() if affects_results(k)}
        history.append(entry)
        previous = cfg
    return history
