"""What ``norga eval`` evaluates: the config its checkpoints were trained with, and where it may write.

``norga eval --run X`` evaluates X's checkpoints with the config they were trained with (the one the last
intact checkpoint records); a ``config.yaml`` that disagrees with it is an error listing the keys
(:func:`norga.engine.run_identity.check_config_file`). To evaluate on other data — another test split
size, the data moved to another root — ask explicitly with ``--set KEY=VALUE`` (applied to the checkpoints'
config) or ``--config CFG`` (a whole config, compared with the checkpoints'): only the evaluation keys
:data:`EVAL_KEYS` may differ; they are applied with a warning and recorded in ``eval.json`` as
``eval_overrides: {key: [trained, evaluated]}``. Any other difference (seed, class order, method, model, ...)
would evaluate something the checkpoints were not trained as, and is an error listing the keys.

Where ``norga eval`` writes is decided by the write guard (:mod:`norga.outputs`): ``eval.json`` is the one
name it writes inside the run folder; elsewhere it never replaces a file it did not write.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..config import Config, ConfigError, from_dict, load_config
from ..config.loading import parse_yaml
from ..errors import RunError
from .provenance import affects_results, changed_values, with_new_defaults

# keys that choose the data a run is evaluated on, or how (not what the checkpoints learned)
EVAL_KEYS = ("data.root", "data.download", "data.test_per_class", "data.num_workers", "data.options.test_per_class",
             "device", "eval_batch_size", "eval_mask_unseen", "amp", "compile")


def with_overrides(resolved: dict, overrides: List[str]) -> dict:
    """A copy of ``resolved`` with ``key.path=value`` overrides applied (values read as YAML, as ``--set``)."""
    merged = copy.deepcopy(resolved)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        key, text = item.split("=", 1)
        node, parts = merged, key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
        node[parts[-1]] = parse_yaml(text) if text.strip() else None
    return merged


def requested_config(trained: dict, config_file: Optional[str], overrides: List[str]) -> Optional[Config]:
    """The config ``--config``/``--set`` ask for (None: neither given); ``--set`` alone changes ``trained``."""
    if config_file is None and not overrides:
        return None
    if config_file:
        return load_config(config_file, overrides)
    return from_dict(Config, with_overrides(with_new_defaults(trained), overrides), "")


def _set(tree: dict, key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        tree = tree.setdefault(part, {})
    tree[last] = value


def evaluation_config(trained: dict, requested: Optional[dict]) -> Tuple[dict, Dict[str, list]]:
    """(config to evaluate with, ``{key: [trained, evaluated]}``): the checkpoints' config plus the evaluation keys
    ``requested`` (a resolved config dict, or None) changes; RunError listing any other key it changes."""
    base = with_new_defaults(trained)
    if requested is None:
        return base, {}
    changes = {k: v for k, v in changed_values(base, requested).items() if affects_results(k)}
    refused = sorted(k for k in changes if k not in EVAL_KEYS)
    if refused:
        raise RunError(f"the checkpoints were trained with other values of {refused[:12]} than --config/--set ask for; "
                       f"norga eval evaluates what the checkpoints were trained with and may change only the "
                       f"evaluation keys {list(EVAL_KEYS)}: drop --config and pass those as --set KEY=VALUE")
    evaluated = copy.deepcopy(base)
    for key, (_, new) in changes.items():
        _set(evaluated, key, new)
    return evaluated, changes


def override_warning(run_dir: Path, overrides: Dict[str, list]) -> str:
    listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in sorted(overrides.items()))
    return (f"warning: {run_dir} evaluated with its checkpoints' config except {listed} (asked by --config/--set); "
            "eval.json records this as eval_overrides")
