"""Tuning protocols, registered by name: what a trial trains on, so that the evaluation data stays out of tuning.

* ``heldout``: trials train and are scored on a *tuning sequence* that shares no class with the evaluation
  sequence (``tune_data``: its data section, merged key by key into the evaluation config's, e.g. another
  ``class_subset`` of the same data set, or another data set);
* ``first_task``: trials train on the evaluation sequence's task 0 only and are scored on a validation split
  carved from task 0's *training* images (``fraction``, default 0.2; ``carve_seed``); the run stops after task 0;
* ``oracle``: trials train and are scored on the evaluation sequence itself, its test split included. Only with
  ``norga tune --oracle``, and everything it writes says "oracle".

The final evaluation of every protocol trains the best configuration on the evaluation sequence with fresh seeds.
A protocol turns the evaluation config's mapping into the tuning config's overrides; it never reads data.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set, Tuple

from ..config import ConfigError
from ..config.loading import merge_configs, resolved_mapping
from ..data.derived_sources import parse_classes
from ..data.sources import DataError
from ..data.transforms import OFFICIAL_RECIPES
from ..registry import registrar
from .spec import TuneSpec

PROTOCOLS: Dict[str, "Protocol"] = {}
register_protocol = registrar(PROTOCOLS, "tuning protocol", set_name=True)


class Protocol:
    """What a protocol provides: its spec options, the tuning config's overrides, where a trial stops."""

    name = ""
    options: Set[str] = set()
    needs_flag = False  # oracle: refused unless norga tune --oracle
    label = ""  # a word every output of the study carries ("oracle")

    def problems(self, spec: TuneSpec, data: dict) -> List[str]:
        """What is wrong with the spec's protocol options for the evaluation data section ``data``."""
        return []

    def tuning_overrides(self, spec: TuneSpec, data: dict) -> List[str]:
        """Overrides turning the evaluation config into the tuning config (after the spec's ``set``)."""
        return []

    def stop_after_tasks(self, spec: TuneSpec) -> Optional[int]:
        """Tasks a trial trains before it is scored (None: the whole sequence)."""
        return None


def data_override(data: dict) -> str:
    return f"data={json.dumps(data)}"


def derived_transforms(data: dict) -> Any:
    """The ``transforms`` a derived data section keeps: 'official' resolved to the wrapped benchmark's recipe
    (a derived source has no official recipe of its own)."""
    chosen = data.get("transforms", "official")
    official = OFFICIAL_RECIPES.get(str(data.get("name")), "backbone")
    return official if chosen == "official" and isinstance(official, str) else chosen


def class_identity(data: dict) -> Tuple[str, Optional[List[int]]]:
    """(what data set a data section reads, its class ids or None for all): two sections with the same identity
    share classes unless both list disjoint ``class_subset`` classes."""
    if data.get("name") in ("class_subset", "validation_carve"):
        options = data.get("options") or {}
        inner = {"name": options.get("source"), "root": data.get("root"), "options": options.get("options") or {}}
        identity, classes = class_identity(inner)
        if data["name"] == "class_subset":
            classes = parse_classes(options.get("classes", []))
        return identity, classes
    return json.dumps({"name": data.get("name"), "root": data.get("root"), "options": data.get("options") or {}},
                      sort_keys=True), None


@register_protocol("heldout")
class Heldout(Protocol):
    """Tune on a sequence disjoint from the evaluation sequence (other classes, or another data set)."""

    options = {"tune_data"}

    def tuning_data(self, spec: TuneSpec, data: dict) -> dict:
        return merge_configs(data, spec.protocol.get("tune_data") or {})

    def problems(self, spec: TuneSpec, data: dict) -> List[str]:
        tune_data = spec.protocol.get("tune_data")
        if not isinstance(tune_data, dict) or not tune_data:
            return [f"{spec.path}: protocol heldout needs tune_data: the data section of the tuning sequence "
                    "(merged into the evaluation config's), e.g. {options: {classes: '50-99'}} for a class_subset"]
        try:
            (used, tuned), (evaluated, held) = class_identity(self.tuning_data(spec, data)), class_identity(data)
        except DataError as err:
            return [f"{spec.path}: protocol.tune_data: {err}"]
        if used != evaluated:
            return []  # another data set
        shared = set() if tuned is None or held is None else set(tuned) & set(held)  # None: all classes
        if tuned is None or held is None or shared:
            which = "all classes" if tuned is None or held is None else f"classes {sorted(shared)[:10]}"
            return [f"{spec.path}: the tuning sequence shares {which} with the evaluation sequence; make both "
                    "class_subset sequences of disjoint classes (data.options.classes), or tune on another data "
                    "set (docs/tuning.md)"]
        return []

    def tuning_overrides(self, spec: TuneSpec, data: dict) -> List[str]:
        return [data_override(self.tuning_data(spec, data))]


@register_protocol("first_task")
class FirstTask(Protocol):
    """Tune on task 0 alone, scored on a validation split carved from task 0's training images."""

    options = {"fraction", "carve_seed"}

    def problems(self, spec: TuneSpec, data: dict) -> List[str]:
        fraction = spec.protocol.get("fraction", 0.2)
        if not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            return [f"{spec.path}: protocol.fraction must be a number in (0, 1) (the validation share of task 0's "
                    "training images)"]
        return []

    def tuning_overrides(self, spec: TuneSpec, data: dict) -> List[str]:
        carved = {**data, "name": "validation_carve", "transforms": derived_transforms(data),
                  "options": {"source": data.get("name"), "options": data.get("options") or {},
                              "fraction": spec.protocol.get("fraction", 0.2),
                              "seed": spec.protocol.get("carve_seed", 0)}}
        return [data_override(carved)]

    def stop_after_tasks(self, spec: TuneSpec) -> Optional[int]:
        return 1


@register_protocol("oracle")
class Oracle(Protocol):
    """Tune on the evaluation sequence's own test data: optimistic, for reference only (norga tune --oracle)."""

    needs_flag = True
    label = "oracle"


def protocol_of(spec: TuneSpec) -> Protocol:
    """The registered protocol the spec names; ConfigError for an unknown name or option."""
    name = spec.protocol_name
    if name not in PROTOCOLS:
        raise ConfigError(f"{spec.path}: unknown protocol {name!r}; choose from {', '.join(sorted(PROTOCOLS))}")
    protocol = PROTOCOLS[name]()
    unknown = sorted(set(spec.protocol) - {"name"} - protocol.options)
    if unknown:
        allowed = ", ".join(sorted(protocol.options)) or "no options"
        raise ConfigError(f"{spec.path}: protocol {name} takes {allowed}, not {unknown}")
    return protocol


def evaluation_data(spec: TuneSpec) -> dict:
    """The evaluation config's data section (its file, ``base:`` chain and the spec's ``set``), unvalidated."""
    return dict(resolved_mapping(spec.base, spec.overrides).get("data") or {})


def checked_protocol(spec: TuneSpec, oracle_allowed: bool) -> Protocol:
    """The spec's protocol once its options fit the evaluation data; oracle refused without ``oracle_allowed``."""
    protocol = protocol_of(spec)
    if protocol.needs_flag and not oracle_allowed:
        raise ConfigError(f"{spec.path}: protocol oracle tunes on the evaluation sequence's test data; its numbers "
                          "are optimistic and labelled 'oracle'. Run norga tune with --oracle to ask for it, or "
                          "use protocol heldout or first_task")
    problems = protocol.problems(spec, evaluation_data(spec))
    if problems:
        raise ConfigError.listing(problems)
    return protocol
