"""Benchmark regimes as data: ``configs/bench/<regime>/regime.yaml`` and one YAML per arm beside it.

A regime is a base config (``base:``, e.g. ``configs/bench/evidence_cpu.yaml``) and its arms; every arm is
``configs/bench/<regime>/<arm>.yaml`` = ``base: ../<base config>`` plus only the arm's own keys, so all arms
of a seed share data, class order and initialisation (paired). ``regime.yaml`` says:

* ``arms`` (run by default), ``optional`` (run only when named with ``--only``), ``seeds``, ``pairs``
  (a − b, paired by seed), ``description``;
* ``quick``: the keys ``--quick`` adds to every arm; an arm whose method reads other options than the base's
  method (its own method section, e.g. a baseline) gets the ``data`` keys of ``quick`` plus
  ``quick_own_method`` instead;
* ``data`` (which data builder of ``bench.real_data_cpu`` makes ``data.root``), ``weights`` (which weights it
  passes as ``model.checkpoint``: ``dinov2``, the default, or ``weak_vit``), ``results`` (the stem of
  ``bench/results/<stem>.{json,md,png}``) and ``runs`` (the run folders' parent under ``runs/``).

Only this module reads those files; the scripts keep the mechanism.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

import yaml

from norga.config import load_config, read_config_file, same_options
from norga.config.registry import method_config_class

REPO = Path(__file__).resolve().parents[1]
BENCH_CONFIGS = REPO / "configs" / "bench"


def flatten(mapping: Dict[str, Any], prefix: str = "") -> List[str]:
    """``{a: {b: 1}}`` -> ``["a.b=1"]``: a mapping of config keys as ``--set`` overrides (leaves in YAML flow)."""
    out: List[str] = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            out += flatten(value, f"{prefix}{key}.")
        else:
            text = json.dumps(value) if not isinstance(value, (dict, list)) else \
                yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
            out.append(f"{prefix}{key}={text}")
    return out


@dataclass(frozen=True)
class Regime:
    name: str
    folder: Path
    description: str
    base: Path  # the base config every arm starts from
    data: str
    results: str
    runs: str
    seeds: List[int]
    arms: List[str]
    optional: List[str]
    pairs: List[Tuple[str, str]]
    quick: Dict[str, Any]
    quick_own_method: Dict[str, Any]
    weights: str = "dinov2"  # which backbone weights bench.regime_data.WEIGHTS passes as model.checkpoint

    def all_arms(self) -> List[str]:
        return self.arms + self.optional

    def arm_config(self, arm: str) -> Path:
        return self.folder / f"{arm}.yaml"

    def own_method(self, arm: str) -> bool:
        """Whether ``arm`` runs a method whose options differ from the base config's method."""
        base = read_config_file(self.base).get("method", {}).get("name")
        mine = read_config_file(self.arm_config(arm)).get("method", {}).get("name", base)
        return mine != base and not same_options(base, mine)

    def overrides(self, arm: str, quick: bool) -> List[str]:
        """What ``--quick`` adds to the arm's config (nothing without it)."""
        if not quick:
            return []
        if self.own_method(arm):
            return flatten({"data": self.quick.get("data", {})}) + flatten(self._own_quick(arm))
        return flatten(self.quick)

    def _own_quick(self, arm: str) -> Dict[str, Any]:
        """The quick keys of an arm with its own method: ``quick``'s method keys that the arm's method has (a
        HiDe-LoRA arm has the base's ``wtp``/``tii``/``tap`` sections), then ``quick_own_method``'s (SimpleCIL
        has no epochs: keys a method lacks are left out)."""
        name = read_config_file(self.arm_config(arm)).get("method", {}).get("name")
        defaults = method_config_class(name)()
        method = {**known_keys(self.quick.get("method", {}), defaults),
                  **known_keys(self.quick_own_method.get("method", {}), defaults)}
        own = {k: v for k, v in self.quick_own_method.items() if k != "method"}
        return {**own, "method": method} if method else own

    def config(self, arm: str, quick: bool, extra: List[str] = ()):
        """The arm's resolved config (``extra``: further overrides, e.g. the seed and data root)."""
        return load_config(self.arm_config(arm), self.overrides(arm, quick) + list(extra))


def known_keys(section: Dict[str, Any], options: Any) -> Dict[str, Any]:
    """The keys of ``section`` (nested mappings) that the config dataclass instance ``options`` has."""
    kept = {}
    for key, value in section.items():
        if not hasattr(options, key):
            continue
        inner = getattr(options, key)
        if isinstance(value, dict) and dataclasses.is_dataclass(inner):
            value = known_keys(value, inner)
            if not value:
                continue
        kept[key] = value
    return kept


def load_regime(folder: Path) -> Regime:
    raw = yaml.safe_load((folder / "regime.yaml").read_text())
    regime = Regime(name=folder.name, folder=folder, description=raw["description"],
                    base=(folder / raw["base"]).resolve(), data=raw["data"], results=raw["results"],
                    runs=raw["runs"], seeds=list(raw["seeds"]), arms=list(raw["arms"]),
                    optional=list(raw.get("optional", [])), pairs=[tuple(p) for p in raw.get("pairs", [])],
                    quick=raw.get("quick", {}), quick_own_method=raw.get("quick_own_method", {}),
                    weights=raw.get("weights", "dinov2"))
    missing = [a for a in regime.all_arms() if not regime.arm_config(a).is_file()]
    if missing:
        raise SystemExit(f"error: {folder / 'regime.yaml'} names arms without a config: "
                         f"{[str(regime.arm_config(a)) for a in missing]}")
    return regime


REGIMES: Dict[str, Regime] = {f.name: load_regime(f) for f in sorted(BENCH_CONFIGS.iterdir())
                              if (f / "regime.yaml").is_file()}
