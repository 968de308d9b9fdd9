"""The run folders ``norga summarize`` reads: which runs count, which are left out and why, groups and their names.

A run counts when its ``metrics.json`` describes all its tasks with ``status`` complete (or no status: older
norga) and agrees with the evaluation rows its checkpoints record (:func:`verified`). Failed runs and incomplete
ones (killed, interrupted) are excluded with the reason; a run whose tasks were trained with different configs
(``mixed_config``) or inputs (``mixed_inputs``: backbone weights, data split) is refused unless ``allow_mixed``.
The runs of a group must have the same config except the seed (and ``logging``).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from ..reports.summary_stats import Estimate, describe

METRICS: Tuple[str, ...] = ("FA", "CA", "FM", "BWT", "TIL FA", "TII acc")
IGNORED_KEYS: Tuple[str, ...] = ("seed", "logging")  # never change what a run learns
PAPER_METRICS: Tuple[str, ...] = ("FA", "CA", "FM")


class SummaryError(ValueError):
    """The run folders cannot be summarised together (message says why)."""


@dataclass
class Run:
    path: Path
    config: dict
    metrics: dict

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", self.metrics.get("seed")))

    def values(self) -> Dict[str, float]:
        """Metric name -> value in % (see METRICS)."""
        m = self.metrics
        tii = m.get("tii_accuracy") or []
        raw = {"FA": m.get("FA"), "CA": m.get("CA"), "FM": m.get("FM"), "BWT": m.get("BWT"),
               "TIL FA": m.get("til_FA"), "TII acc": sum(tii) / len(tii) if tii else None}
        return {k: math.nan if v is None else 100.0 * float(v) for k, v in raw.items()}


@dataclass
class Group:
    name: str
    runs: List[Run]
    excluded: List[Tuple[Path, str]] = field(default_factory=list)

    @property
    def seeds(self) -> List[int]:
        return [r.seed for r in self.runs]

    def by_seed(self, metric: str) -> Dict[int, float]:
        return {r.seed: r.values()[metric] for r in self.runs}

    def estimates(self) -> Dict[str, Estimate]:
        return {k: describe([r.values()[k] for r in self.runs]) for k in METRICS}


def load_run(path: Path, allow_mixed: bool = False) -> Tuple[Optional[Run], str]:
    """(Run, "") for a finished run, or (None, reason) for a folder to exclude (a failed run: its reason).

    A run whose tasks were trained with different configs (``--force``; ``mixed_config`` in metrics.json) is
    refused with a SummaryError unless ``allow_mixed``: its config.yaml describes only its last tasks."""
    path = Path(path)
    cfg_file, metrics_file = path / "config.yaml", path / "metrics.json"
    if not path.is_dir():
        return None, "not a folder"
    if not cfg_file.is_file():
        return None, "no config.yaml (not a norga run folder?)"
    if not metrics_file.is_file():
        return None, "no metrics.json (no task completed yet)"
    try:
        config = yaml.safe_load(cfg_file.read_text()) or {}
        metrics = json.loads(metrics_file.read_text())
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        return None, f"unreadable config.yaml or metrics.json ({err.__class__.__name__})"
    done, total = metrics.get("completed_tasks"), metrics.get("num_tasks")
    stopped = metrics.get("stopped") or {}
    if metrics.get("status") == "failed":
        return None, f"failed in task {stopped.get('task')}: {stopped.get('reason', 'no reason recorded')}"
    if done is None or total is None or done < total:
        how = f" (interrupted in task {stopped.get('task')})" if metrics.get("status") == "interrupted" else ""
        return None, f"incomplete: {done}/{total} tasks completed{how}"
    metrics = verified(path, metrics)
    if metrics.get("mixed_config") and not allow_mixed:
        changes = [sorted(h.get("changed", {})) for h in metrics.get("config_history", [])[1:]]
        raise SummaryError(f"{path} was trained with different configs across its tasks (--force; changed: "
                           f"{changes}, see config_history in its metrics.json): its numbers are not those of one "
                           "config; leave it out, or pass --allow-mixed to pool it anyway")
    if metrics.get("mixed_inputs") and not allow_mixed:
        changes = [sorted(h.get("changed", {})) for h in metrics.get("inputs_history", [])[1:]]
        raise SummaryError(f"{path} was trained on different inputs across its tasks (--force; changed: {changes}, "
                           "see inputs_history in its metrics.json): its numbers are not those of one backbone and "
                           "data split; leave it out, or pass --allow-mixed to pool it anyway")
    return Run(path, config, metrics), ""


def verified(path: Path, metrics: dict) -> dict:
    """``metrics`` of a finished run after checking them against its checkpoints' evaluation rows
    (:func:`norga.engine.run_truth.check_metrics`: one RunError naming metrics.json and the fix). A folder with
    neither a run marker nor checkpoints (hand-made, or its checkpoints deleted) cannot be checked and is taken as
    it is."""
    if not (path / "norga-run.json").is_file() and not (path / "checkpoints").is_dir():
        return metrics
    from .run_folder import RunDir  # torch: only for folders that have checkpoints to read
    from .run_truth import check_metrics

    return check_metrics(RunDir(path), metrics)


def flatten(config: dict, prefix: str = "") -> Dict[str, object]:
    """Nested config -> {"wtp.epochs": 3, ...}; lists stay values."""
    flat: Dict[str, object] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def _ignored(key: str, ignore: Sequence[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in ignore)


def differing_keys(configs: Sequence[dict], ignore: Sequence[str] = IGNORED_KEYS) -> Dict[str, list]:
    """Flattened keys whose values are not all equal -> the value of each config (missing: '<absent>')."""
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    diff = {}
    for key in keys:
        values = [f.get(key, "<absent>") for f in flats]
        if not _ignored(key, ignore) and any(v != values[0] for v in values[1:]):
            diff[key] = values
    return diff


def check_comparable(group: Group, ignore: Sequence[str]) -> None:
    """Raise SummaryError naming every config key that differs between the group's runs, or a repeated seed."""
    diff = differing_keys([r.config for r in group.runs], ignore)
    if diff:
        lines = [f"  {key}: " + ", ".join(f"{r.path.name}={v!r}" for r, v in zip(group.runs, values))
                 for key, values in diff.items()]
        raise SummaryError(f"runs of group '{group.name}' are not comparable: their configs differ in more than "
                           f"the seed ({len(diff)} key(s)):\n" + "\n".join(lines) +
                           "\n(pass --ignore KEY to accept a difference, or summarise the groups separately)")
    seeds = group.seeds
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        names = [r.path.name for r in group.runs if r.seed in repeated]
        raise SummaryError(f"group '{group.name}' has several runs with seed(s) {repeated} ({', '.join(names)}): "
                           "seeds must differ to be averaged")


def group_name(paths: Sequence[Path], fallback: str) -> str:
    """A group's name from its folders: the shared folder name with a trailing seed (``_s42``, ``-seed43``,
    ``_44``) removed; for folders named by the seed only (``runs/norga/s42``) the shared parent folder; else
    the folders' common prefix; else the first folder's name and how many more (``alpha +1 more``), never a
    bare letter unless no folder has a name (then ``fallback``)."""
    resolved = [Path(p).resolve() for p in paths]
    stems = [_seedless(p.name) for p in resolved]
    if set(stems) == {""}:
        parents = {_seedless(p.parent.name) for p in resolved}
        if len(parents) == 1 and "" not in parents:
            return parents.pop()
    elif len(set(stems)) == 1:
        return stems[0]
    prefix = re.sub(r"[_\-.]+$", "", _common_prefix([p.name for p in resolved])) if any(stems) else ""
    if prefix:
        return prefix
    first = (stems[0] or resolved[0].name) if resolved else ""
    return (f"{first} +{len(resolved) - 1} more" if len(resolved) > 1 else first) if first else fallback


def _seedless(name: str) -> str:
    return re.sub(r"[_-]?(s|seed)?\d+$", "", name)


def _common_prefix(names: Sequence[str]) -> str:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def load_group(paths: Sequence[Path], name: Optional[str], fallback: str, ignore: Sequence[str],
               allow_mixed: bool = False) -> Group:
    runs, excluded = [], []
    for p in paths:
        run, reason = load_run(Path(p), allow_mixed)
        if run is None:
            excluded.append((Path(p), reason))
        else:
            runs.append(run)
    group = Group(name or group_name(paths, fallback), sorted(runs, key=lambda r: r.seed), excluded)
    if not group.runs:
        listed = "; ".join(f"{p}: {why}" for p, why in excluded)
        raise SummaryError(f"group '{group.name}' has no complete run to summarise ({listed})")
    check_comparable(group, ignore)
    return group


# ---- formatting ------------------------------------------------------------------------------
