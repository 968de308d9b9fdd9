"""The files of an export folder and their checks: the per-task state files, the manifest ``norga-export.json``,
and :func:`verify_export`, run by ``norga eval --from`` and ``norga export --push`` before anything else.

* ``state/task_XX.safetensors`` holds the tensors of the method's state after task XX, keyed ``t0, t1, ...``;
  ``state/task_XX.json`` is ``{"format", "task", "method", "config_hash", "state"}``: ``state`` is the rest of the
  state with each tensor replaced by ``{"__tensor__": key}`` (:func:`split_state`), ``config_hash`` the hash that
  task's checkpoint recorded for the config that trained it (:func:`norga.engine.provenance.config_hash`).
* ``norga-export.json`` (the export's zone marker, :mod:`norga.outputs`) is written first with ``complete: false``
  and last with ``complete: true`` and the sha256 of every other file (relative posix paths).

Every malformed or modified file is one :class:`ExportError` line naming it and the fix.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

import torch
import yaml

from ..errors import NorgaError
from ..files import sha256_file
from ..outputs import MANIFEST
from .provenance import config_hash

MARKER = "norga-export.json"
FORMAT = "norga-export/1"
STATE_FORMAT = "norga-export-state/1"
REDO = "re-export the run (norga export)"
MANIFEST_KEYS = frozenset({"format", "complete", "norga", "run_id", "tasks", "num_tasks", "config_hash", "files"})
STATE_KEYS = frozenset({"format", "task", "method", "config_hash", "state"})
# files norga may add to a finished export (top level): eval --from's default output, the write guard's record
NOT_LISTED = frozenset({"eval.json", MANIFEST})


class ExportError(NorgaError, RuntimeError):
    """An export folder cannot be written, read or pushed."""


# ---- nested method state <-> (tensors, JSON) ---------------------------------
def split_state(obj: Any, tensors: Dict[str, torch.Tensor]) -> Any:
    """JSON-able skeleton of ``obj``; each tensor goes to ``tensors`` under a positional key ``"t<N>"``."""
    if isinstance(obj, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[split_state(k, tensors), split_state(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [split_state(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [split_state(v, tensors) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise ExportError(f"method state holds a {type(obj).__name__}, which an export cannot store")


def join_state(skeleton: Any, tensors: Dict[str, Any], where: str = "the state") -> Any:
    """Inverse of :func:`split_state`; an entry it does not know or a tensor key missing from ``tensors`` is an
    ExportError naming ``where`` (the state file)."""
    if isinstance(skeleton, list):
        return [join_state(v, tensors, where) for v in skeleton]
    if not isinstance(skeleton, dict):
        return skeleton
    kind, value = next(iter(skeleton.items())) if len(skeleton) == 1 else (sorted(skeleton, key=str), None)
    if kind == "__tensor__":
        if not isinstance(value, str) or value not in tensors:
            raise ExportError(f"{where} refers to tensor {value!r}, which its .safetensors file does not hold; {REDO}")
        return tensors[value]
    if kind == "__tuple__" and isinstance(value, list):
        return tuple(join_state(v, tensors, where) for v in value)
    if kind == "__dict__" and isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        joined = {}
        for key, item in value:
            key = join_state(key, tensors, where)
            if isinstance(key, (list, dict)):
                raise ExportError(f"{where} holds a dict key that is a {type(key).__name__}: the file was edited; "
                                  f"{REDO}")
            joined[key] = join_state(item, tensors, where)
        return joined
    raise ExportError(f"{where}: unknown entry {kind!r} (expected __tensor__, __tuple__ or __dict__): the file was "
                      f"edited; {REDO}")


class _Keys(dict):
    """Tensor keys of a safetensors file (values None) that remember which keys a skeleton used."""

    def __init__(self, keys: Iterable[str]):
        super().__init__((k, None) for k in keys)
        self.used: set = set()

    def __getitem__(self, key: str) -> None:
        self.used.add(key)
        return super().__getitem__(key)


def state_files(task: int, state: dict, method: str, digest: Optional[str]) -> Dict[str, bytes]:
    """{relative name: bytes} of task ``task``'s two state files (``digest``: its checkpoint's config hash)."""
    from safetensors.torch import save

    tensors: Dict[str, torch.Tensor] = {}
    doc = {"format": STATE_FORMAT, "task": task, "method": method, "config_hash": digest,
           "state": split_state(state, tensors)}
    stem = f"state/task_{task:02d}"
    return {f"{stem}.safetensors": save(tensors), f"{stem}.json": (json.dumps(doc) + "\n").encode()}


# ---- reading the files ------------------------------------------------------------
def read_json(path: Path) -> Any:
    """A JSON file's content; unreadable or invalid JSON is one line naming the file."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ExportError(f"{path} is unreadable or not valid JSON ({type(err).__name__}); {REDO}") from err


def _tensors(path: Path, keys_only: bool) -> Dict[str, Any]:
    """The tensors of a safetensors file (``keys_only``: their keys, values None; reads only the header)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        if not keys_only:
            return load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            return _Keys(f.keys())
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ExportError(f"{path} is not a readable safetensors file ({first}); {REDO}") from err


def read_state_json(folder: Path, task: int) -> dict:
    """The checked content of ``state/task_XX.json`` (keys :data:`STATE_KEYS`, this task, format)."""
    path = Path(folder) / "state" / f"task_{task:02d}.json"
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ExportError(f"{path} is not a norga export state file (not a JSON object); {REDO}")
    unknown, missing = sorted(set(raw) - STATE_KEYS), sorted(STATE_KEYS - set(raw))
    if unknown or missing:
        what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r} key"
        raise ExportError(f"{path} has {what} (a norga export state file holds {sorted(STATE_KEYS)}); {REDO}")
    if raw["format"] != STATE_FORMAT or raw["task"] != task:
        raise ExportError(f"{path} is not the state of task {task} in format {STATE_FORMAT} (it says task "
                          f"{raw['task']!r}, format {raw['format']!r}): it was renamed or edited; {REDO}")
    return raw


def read_state(folder: Path, task: int) -> dict:
    """The method state after ``task`` of the export ``folder`` (tensors loaded on the CPU)."""
    raw = read_state_json(folder, task)
    tensors = _tensors(Path(folder) / "state" / f"task_{task:02d}.safetensors", keys_only=False)
    return join_state(raw["state"], tensors, str(Path(folder) / "state" / f"task_{task:02d}.json"))


def expected_files(tasks: int) -> set:
    """The relative names a manifest of a ``tasks``-task export lists."""
    states = {f"state/task_{t:02d}.{ext}" for t in range(tasks) for ext in ("json", "safetensors")}
    return {"config.yaml", "metrics.json", "README.md"} | states


def read_manifest(folder: Path) -> dict:
    """The checked ``norga-export.json`` of a finished export (module doc)."""
    path = Path(folder) / MARKER
    if not path.is_file():
        old = (Path(folder) / "config.yaml").is_file()
        raise ExportError(f"{folder} has no {MARKER}: " + ("it was written by an older norga, whose exports cannot "
                          f"be verified; {REDO}" if old else "it is not a norga export; give a folder written by "
                          "norga export"))
    raw = read_json(path)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ExportError(f"{path} is not a norga export manifest (format {FORMAT} expected); {REDO}")
    if raw.get("complete") is not True:
        raise ExportError(f"{folder} is an unfinished export (its writing was interrupted: {MARKER} says "
                          f"complete: false); remove it and {REDO}")
    unknown, missing = sorted(set(raw) - MANIFEST_KEYS), sorted(MANIFEST_KEYS - set(raw))
    if unknown or missing:
        what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r} key"
        raise ExportError(f"{path} has {what}: it was edited; {REDO}")
    files, tasks = raw["files"], raw["tasks"]
    if not (isinstance(tasks, int) and tasks > 0 and isinstance(files, dict) and set(files) == expected_files(tasks)
            and all(isinstance(v, str) for v in files.values())):
        raise ExportError(f"{path} does not list the files of a {tasks!r}-task export: it was edited; {REDO}")
    return raw


# ---- verification ---------------------------------------------------------------
@dataclass
class VerifiedExport:
    """An export folder that passed :func:`verify_export`: its task count, config.yaml, metrics.json and the
    files its manifest lists ({relative name: sha256})."""

    folder: Path
    tasks: int
    config: dict
    metrics: dict
    files: Dict[str, str]


def present_files(folder: Path) -> set:
    """Relative posix names of the files under ``folder``, minus the manifest and :data:`NOT_LISTED`."""
    found = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}
    return found - {MARKER} - NOT_LISTED


def check_files(folder: Path, files: Dict[str, str]) -> None:
    """The files present are exactly those ``files`` lists, each with its recorded sha256."""
    present = present_files(folder)
    for name in sorted(set(files) - present):
        raise ExportError(f"{folder / name} is missing ({MARKER} lists it); put it back or {REDO}")
    for name in sorted(present - set(files)):
        raise ExportError(f"{folder / name} is not one of the export's files (not listed in {MARKER}); remove it, "
                          f"or {REDO}")
    for name in sorted(files):
        try:
            actual = sha256_file(folder / name)
        except OSError as err:
            raise ExportError(f"{folder / name} cannot be read ({err.strerror or err}); {REDO}") from err
        if actual != files[name]:
            raise ExportError(f"{folder / name} does not match the sha256 {MARKER} records for it: it was modified "
                              f"or truncated after the export; {REDO}")


def read_config(folder: Path) -> dict:
    """config.yaml of an export as a mapping (one line if it is not valid YAML or not a mapping)."""
    path = Path(folder) / "config.yaml"
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ExportError(f"{path} is unreadable or not valid YAML ({type(err).__name__}); {REDO}") from err
    if not isinstance(raw, dict):
        raise ExportError(f"{path} is not a norga config (top level is not a mapping); {REDO}")
    return raw


def check_states(folder: Path, tasks: int, config: dict, mixed: bool) -> None:
    """Each state file is well formed, of config.yaml's method, trained with config.yaml's config (earlier tasks
    of a mixed-config run, ``mixed``, may record another config hash), and uses exactly its tensors."""
    digest, method = config_hash(config), (config.get("method") or {}).get("name")
    for t in range(tasks):
        name = folder / "state" / f"task_{t:02d}.json"
        raw = read_state_json(folder, t)
        if raw["method"] != method:
            raise ExportError(f"{name} holds a state of method {raw['method']!r}, but config.yaml's method is "
                              f"{method!r}: one of them was edited; {REDO}")
        recorded = raw["config_hash"]
        if recorded != digest and (t == tasks - 1 or not mixed):
            raise ExportError(f"{folder / 'config.yaml'} is not the config task {t} was trained with (its config "
                              f"hash is {digest}, {name.name} records {recorded}): it was edited; {REDO}")
        keys = _tensors(folder / "state" / f"task_{t:02d}.safetensors", keys_only=True)
        join_state(raw["state"], keys, str(name))
        unused = sorted(set(keys) - keys.used)
        if unused:
            raise ExportError(f"{name.with_suffix('.safetensors')} holds tensors {unused[:3]} that {name.name} does "
                              f"not use: the files were edited; {REDO}")


def verify_export(folder: Path) -> VerifiedExport:
    """Check an export folder before it is evaluated or pushed (module doc): manifest complete, exactly its files
    present with their sha256, config.yaml against the states' config hashes, every file well formed."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"{folder} is not a folder; give a folder written by norga export")
    manifest = read_manifest(folder)
    check_files(folder, manifest["files"])
    config, metrics, tasks = read_config(folder), read_json(folder / "metrics.json"), manifest["tasks"]
    if not isinstance(metrics, dict) or metrics.get("completed_tasks") != tasks:
        raise ExportError(f"{folder / 'metrics.json'} does not record the {tasks} task(s) whose states the export "
                          f"holds: it was edited; {REDO}")
    if config_hash(config) != manifest["config_hash"]:
        raise ExportError(f"{folder / 'config.yaml'} is not the config {MARKER} records (config hash "
                          f"{config_hash(config)} vs {manifest['config_hash']}): it was edited; {REDO}")
    check_states(folder, tasks, config, metrics.get("mixed_config") is True)
    return VerifiedExport(folder, tasks, config, metrics, manifest["files"])
