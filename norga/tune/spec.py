"""The tuning spec: the YAML file ``norga tune SPEC.yaml`` reads, checked whole before anything is written.

::

    config: smoke                # the evaluation config: a file (relative to the spec) or a shipped config name
    set: [data.num_tasks=2]      # overrides applied to every run (tuning and final evaluation)
    space:                       # config key -> a distribution
      method.wtp.lr: {type: float, low: 0.001, high: 0.1, log: true}
      method.wtp.epochs: {type: int, low: 1, high: 5}
      method.gate.activation: {type: categorical, choices: [tanh, gelu]}
    protocol: {name: heldout, tune_data: {options: {classes: "15-29"}}}   # docs/tuning.md: heldout, first_task, oracle
    budget: {trials: 20, minutes: 60}   # finished trials (complete or pruned) and/or wall time of one invocation
    objective: FA                # FA (default), CA, FM, BWT, til_FA; FM is minimised, the others maximised
    seeds: {tune: [0], final: [1, 2, 3, 4, 5]}   # final: fresh seeds, none of them a tuning seed
    sampler: {seed: 0}           # TPE's seed (worker k of several uses seed + k)
    pruner: {name: median, n_startup_trials: 3}  # median | threshold | percentile | none, with Optuna's options

Torch-free and Optuna-free: every key, value and config key is checked with the config's own checks
(:func:`norga.config.load_config`), and all problems are reported together in one :class:`ConfigError`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..config import ConfigError, load_config
from ..config.loading import parse_yaml
from ..config.shipped import config_file

KEYS = {"config", "set", "space", "protocol", "budget", "objective", "seeds", "sampler", "pruner", "out",
        "study_name", "description"}
DIRECTIONS = {"FA": "maximize", "CA": "maximize", "til_FA": "maximize", "BWT": "maximize", "FM": "minimize"}
DISTRIBUTIONS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
                 "categorical": {"choices"}}
PRUNERS = {"median": "MedianPruner", "percentile": "PercentilePruner", "threshold": "ThresholdPruner",
           "none": "NopPruner"}


@dataclass(frozen=True)
class Param:
    """One searched config key: ``kind`` float | int | categorical; ``options`` Optuna's suggest arguments."""

    key: str
    kind: str
    options: Dict[str, Any]

    def extremes(self) -> List[Any]:
        """The values the config must accept: both bounds, or every choice."""
        return list(self.options["choices"]) if self.kind == "categorical" else [self.options["low"],
                                                                                   self.options["high"]]


@dataclass
class TuneSpec:
    """A read, checked spec. ``base``: what ``load_config`` reads (a path or a shipped name)."""

    path: Path
    base: str
    overrides: List[str]
    space: List[Param]
    protocol: Dict[str, Any]
    trials: Optional[int]
    minutes: Optional[float]
    metric: str
    direction: str
    tune_seeds: List[int]
    final_seeds: List[int]
    sampler_seed: int
    pruner: Dict[str, Any]
    output: Optional[str]
    study_name: str
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def protocol_name(self) -> str:
        return str(self.protocol["name"])

    def fingerprint(self) -> str:
        """sha256 (16 hex digits) of what a study is the continuation of: config, overrides, space, protocol,
        objective and tuning seeds (not the budget, the output or the final seeds)."""
        kept = {k: self.raw.get(k) for k in ("config", "set", "space", "protocol", "objective")}
        kept["tune_seeds"] = self.tune_seeds
        return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def value_override(key: str, value: Any) -> str:
    """A ``--set`` item giving config ``key`` the value ``value`` (JSON is YAML)."""
    return f"{key}={json.dumps(value)}"


def read_spec(path: Path) -> TuneSpec:
    """The spec at ``path``, every problem of it in one ConfigError (the config's own checks included)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"tuning spec {path} does not exist; give a YAML file (example: configs/tune/smoke.yaml)")
    raw = parse_yaml(path.read_text())
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a tuning spec is a mapping of {sorted(KEYS)}")
    problems: List[str] = [f"{path}: unknown key {k!r}; allowed: {', '.join(sorted(KEYS))}" for k in raw
                           if k not in KEYS]
    spec = _build(path, raw, problems)
    if not problems:
        problems += config_problems(spec)
    if problems:
        raise ConfigError.listing(problems)
    return spec


def _build(path: Path, raw: dict, problems: List[str]) -> TuneSpec:
    base = raw.get("config")
    if not isinstance(base, str) or not base.strip():
        problems.append(f"{path}: config must name the evaluation config (a YAML file or a shipped config name)")
        base = ""
    local = path.parent / base if base else None
    overrides = raw.get("set") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        problems.append(f"{path}: set must be a list of KEY=VALUE strings")
        overrides = []
    budget = _mapping(raw, "budget", {"trials", "minutes"}, problems, path)
    seeds = _mapping(raw, "seeds", {"tune", "final"}, problems, path)
    sampler = _mapping(raw, "sampler", {"seed"}, problems, path)
    pruner = raw.get("pruner", {"name": "median", "n_startup_trials": 3})
    metric = raw.get("objective", "FA")
    if isinstance(metric, dict):
        metric = metric.get("metric", "FA")
    if metric not in DIRECTIONS:
        problems.append(f"{path}: objective {metric!r} is not a metric; choose from {', '.join(DIRECTIONS)}")
    spec = TuneSpec(path=path, base=str(local) if local is not None and local.is_file() else base,
                    overrides=list(overrides), space=_space(raw.get("space"), problems, path),
                    protocol=_protocol(raw.get("protocol"), problems, path), trials=budget.get("trials"),
                    minutes=budget.get("minutes"), metric=str(metric), direction=DIRECTIONS.get(metric, "maximize"),
                    tune_seeds=_seeds(seeds.get("tune", [0]), "seeds.tune", problems, path),
                    final_seeds=_seeds(seeds.get("final", [1, 2, 3, 4, 5]), "seeds.final", problems, path),
                    sampler_seed=sampler.get("seed", 0), pruner=_pruner(pruner, problems, path),
                    output=raw.get("out"), study_name=str(raw.get("study_name") or path.stem), raw=raw)
    _check_budget(spec, problems)
    if set(spec.tune_seeds) & set(spec.final_seeds):
        problems.append(f"{path}: seeds.final {sorted(set(spec.tune_seeds) & set(spec.final_seeds))} are also "
                        "tuning seeds; the final evaluation needs fresh seeds")
    if not isinstance(spec.sampler_seed, int):
        problems.append(f"{path}: sampler.seed must be an integer")
    return spec


def _mapping(raw: dict, key: str, allowed: set, problems: List[str], path: Path) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        problems.append(f"{path}: {key} must be a mapping with keys {sorted(allowed)}")
        return {}
    problems += [f"{path}: unknown key {key}.{k}; allowed: {', '.join(sorted(allowed))}" for k in value
                 if k not in allowed]
    return value


def _space(raw: Any, problems: List[str], path: Path) -> List[Param]:
    if not isinstance(raw, dict) or not raw:
        problems.append(f"{path}: space is empty; give at least one config key with a distribution, e.g. "
                        "'method.wtp.lr: {type: float, low: 0.001, high: 0.1, log: true}'")
        return []
    params = []
    for key, dist in raw.items():
        where = f"{path}: space.{key}"
        if not isinstance(dist, dict) or dist.get("type") not in DISTRIBUTIONS:
            problems.append(f"{where} must be a mapping with type float, int or categorical")
            continue
        kind, options = dist["type"], {k: v for k, v in dist.items() if k != "type"}
        unknown = sorted(set(options) - DISTRIBUTIONS[kind])
        if unknown:
            problems.append(f"{where}: unknown options {unknown}; a {kind} takes {sorted(DISTRIBUTIONS[kind])}")
        elif kind == "categorical" and (not isinstance(options.get("choices"), list) or not options["choices"]):
            problems.append(f"{where}: choices must be a non-empty list")
        elif kind != "categorical" and not _valid_range(kind, options):
            problems.append(f"{where}: low and high must be {kind}s with low <= high (low > 0 with log: true)")
        else:
            params.append(Param(str(key), kind, options))
    return params


def _valid_range(kind: str, options: dict) -> bool:
    number = (int,) if kind == "int" else (int, float)
    low, high = options.get("low"), options.get("high")
    ok = all(isinstance(v, number) and not isinstance(v, bool) for v in (low, high)) and low <= high
    return ok and (not options.get("log") or low > 0)


def _protocol(raw: Any, problems: List[str], path: Path) -> Dict[str, Any]:
    protocol = {"name": raw} if isinstance(raw, str) else raw
    if not isinstance(protocol, dict) or "name" not in protocol:
        problems.append(f"{path}: protocol must name one of heldout, first_task, oracle (docs/tuning.md)")
        return {"name": "heldout"}
    return dict(protocol)


def _seeds(raw: Any, key: str, problems: List[str], path: Path) -> List[int]:
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        problems.append(f"{path}: {key} must be a non-empty list of integer seeds")
        return [0]
    return list(raw)


def _pruner(raw: Any, problems: List[str], path: Path) -> Dict[str, Any]:
    pruner = {"name": raw} if isinstance(raw, str) else raw
    if not isinstance(pruner, dict) or pruner.get("name") not in PRUNERS:
        problems.append(f"{path}: pruner must name one of {', '.join(PRUNERS)} (with Optuna's options)")
        return {"name": "none"}
    return dict(pruner)


def _check_budget(spec: TuneSpec, problems: List[str]) -> None:
    trials, minutes = spec.trials, spec.minutes
    if trials is None and minutes is None:
        problems.append(f"{spec.path}: budget needs trials and/or minutes, e.g. budget: {{trials: 20}}")
    if trials is not None and (not isinstance(trials, int) or trials < 1):
        problems.append(f"{spec.path}: budget.trials must be an integer >= 1")
    if minutes is not None and (not isinstance(minutes, (int, float)) or minutes <= 0):
        problems.append(f"{spec.path}: budget.minutes must be a number > 0")


def config_problems(spec: TuneSpec) -> List[str]:
    """The evaluation config's own problems with every searched value (both bounds, every choice)."""
    try:
        config_file(spec.base)
    except ConfigError as err:
        return [f"{spec.path}: config: {err}"]
    problems: List[str] = []
    for param in spec.space:
        for value in param.extremes():
            try:
                load_config(spec.base, spec.overrides + [value_override(param.key, value)])
            except ConfigError as err:
                problems.append(f"{spec.path}: space.{param.key} = {value!r}: {err}")
                break
    return problems
