"""Export a trained run to a self-contained folder, evaluate such an export, push it to the Hugging Face Hub.

An export folder (``norga export --run RUN --out DIR``) holds

* ``state/task_XX.safetensors`` and ``state/task_XX.json``: the method's state after task XX (prompts, gates,
  heads, adapters, statistics: whatever :meth:`~norga.methods.base.Method.state_dict` keeps), its tensors and the
  rest, with the config hash its checkpoint recorded (:mod:`norga.engine.export_verify`);
* ``config.yaml`` (the resolved config the checkpoints were trained with), ``metrics.json``, a model card
  ``README.md``;
* ``norga-export.json``: the export's zone marker (:mod:`norga.outputs`) and manifest, written first (``complete:
  false``) and last (``complete: true`` and the sha256 of every other file). A failed export removes what it wrote.

Every task's state is kept, not only the last one's, so that ``norga eval --from DIR`` recomputes the run's
whole accuracy matrix (row t is evaluated with the state after task t) without the run folder. ``eval --from``
and ``--push`` first verify the folder (:func:`~norga.engine.export_verify.verify_export`).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import yaml

from .._version import __version__
from ..config import Config, ConfigError, config_to_dict, from_dict
from ..files import sha256_hex
from ..outputs import Zone, write_output, zone_of
from .export_verify import (FORMAT, MARKER, ExportError, VerifiedExport, join_state, read_state, split_state,
                            state_files, verify_export)
from .provenance import config_hash, history_note, with_new_defaults
from .run_folder import RunDir
from .run_identity import trained_config
from .run_marker import read_marker
from .saved_states import evaluate_states

__all__ = ["ExportError", "export_run", "evaluate_export", "push_export", "join_state", "split_state",
           "read_state", "verify_export", "model_card"]


# ---- model card -------------------------------------------------------------------
def backbone_checksum(backbone: dict) -> str:
    """The checksum metrics.json recorded for the weights the run was trained with (a local file or a Hub
    file: first 16 hex digits of its sha256), or what the weights are when there was no such file."""
    if backbone.get("checkpoint_sha256_16"):
        return f"{backbone['checkpoint_sha256_16']} (first 16 hex digits)"
    return "timm pretrained weights" if backbone.get("pretrained") else "none (randomly initialised backbone)"


def config_history_of(metrics: dict) -> List[dict]:
    """The well-formed entries of metrics.json's ``config_history`` (``{"tasks": [first, last], ...}``)."""
    history = metrics.get("config_history")
    return [e for e in history if isinstance(e, dict) and isinstance(e.get("tasks"), list) and len(e["tasks"]) == 2
            ] if isinstance(history, list) else []


def mixed_config_note(metrics: dict) -> Optional[str]:
    """One sentence on which tasks were trained with which config (None for a one-config run)."""
    history = config_history_of(metrics)
    if metrics.get("mixed_config") is not True and len(history) < 2:
        return None
    parts = []
    for entry in history:
        first, last = entry["tasks"]
        changed = "; ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in sorted((entry.get("changed") or {}).items())
                            if isinstance(v, list) and len(v) == 2)
        span = f"task {first}" if first == last else f"tasks {first}-{last}"
        parts.append(f"{span} with config {entry.get('config_hash')}" + (f" (changed {changed})" if changed else ""))
    return ("mixed config: the tasks were not all trained with one config (norga train --force): "
            f"{', '.join(parts) or 'see config_history in metrics.json'}; config.yaml is the last tasks' config")


def model_card(cfg: dict, metrics: dict, run_dir: Path, tasks: int) -> str:
    """README.md of an export: method, backbone and checksum, benchmark, seed, FA/CA/FM, the ``tasks`` exported
    of the benchmark's, a mixed config if any, how to evaluate and reproduce."""
    model, data = cfg.get("model", {}), cfg.get("data", {})
    backbone = model.get("name") or model.get("preset") or "?"
    mixed = mixed_config_note(metrics)

    def number(key: str) -> str:
        value = metrics.get(key)
        return f"{value:.4f}" if isinstance(value, (int, float)) else "n/a"
    reproduce = f"`norga train --config config.yaml --output-dir {Path(run_dir).name}`"
    return "\n".join([
        "---", "library_name: norga", "tags: [continual-learning, class-incremental, vision-transformer]", "---",
        f"# {cfg.get('method', {}).get('name')} on {data.get('name')} (norga export)", "",
        "| | |", "|---|---|",
        f"| method | {cfg.get('method', {}).get('name')} |",
        f"| backbone | {backbone} (checkpoint: {model.get('checkpoint')}) |",
        f"| backbone sha256 | {backbone_checksum(metrics.get('backbone', {}))} |",
        f"| benchmark | {data.get('name')}, {data.get('num_tasks')} tasks |",
        f"| seed | {cfg.get('seed')} |",
        f"| config | {mixed or 'one config for every task (config.yaml)'} |",
        f"| FA / CA / FM | {number('FA')} / {number('CA')} / {number('FM')} |",
        f"| tasks trained | {tasks} of {metrics.get('num_tasks')} |", "",
        "Evaluate this export (same accuracy matrix as metrics.json): `norga eval --from THIS_FOLDER`", "",
        (f"Reproduce the training: {reproduce}" if mixed is None else
         f"This run cannot be reproduced with one command: {reproduce} trains every task with the last tasks' config "
         "(see config_history in metrics.json)"), "",
    ])


# ---- export --------------------------------------------------------------------
def _check_out(out: Path) -> None:
    """ExportError unless ``out`` is a new or empty folder outside every zone (run folder, export, store)."""
    if (out / MARKER).is_file():
        raise ExportError(f"--out {out} already holds an export (finished or interrupted); remove it or give a new "
                          "folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out} exists and is not an empty folder; give a new folder")
    found = zone_of(out)
    if found is not None:
        raise ExportError(f"--out {out} lies inside the {found[1]} {found[0]}, whose files norga manages; give a "
                          "folder outside it")


def _run_metrics(run: RunDir, done: int) -> dict:
    """The run's metrics.json, refused unless it describes exactly the ``done`` intact checkpoints."""
    metrics = run.read_metrics()
    if metrics is None:
        raise ExportError(f"{run.root}/metrics.json is missing or unreadable; run norga train on the folder again "
                          "to rebuild it, then export")
    recorded = metrics.get("completed_tasks")
    if isinstance(recorded, int) and recorded > done:
        raise ExportError(f"{run.root}: metrics.json records {recorded} completed tasks but checkpoints/task_"
                          f"{done:02d}.pt is missing, so only {done} could be exported; put it back, or run norga "
                          f"train on {run.root} to train task {done} again, then export")
    if recorded != done:
        raise ExportError(f"{run.root}/metrics.json records {recorded} completed tasks, its checkpoints {done}: it "
                          f"is out of date; run norga train on {run.root} (it rewrites metrics.json), then export")
    return metrics


def _task_state(run: RunDir, task: int, method: str) -> Tuple[dict, Optional[str]]:
    """(the method state of checkpoint ``task``, the hash of the config that trained it; None if not recorded)."""
    saved = run.load_checkpoint(task)
    if saved.get("method_name") != method or not isinstance(saved.get("method"), dict):
        raise ExportError(f"{run.root}: checkpoint of task {task} is not one of method {method}; use a new run")
    config = saved.get("config")
    return saved["method"], (config_hash(config) if isinstance(config, dict) else None)


@contextlib.contextmanager
def _removed_on_failure(out: Path) -> Iterator[None]:
    """On any failure (or Ctrl-C) inside, remove what the export created: ``out`` was new or empty."""
    existed = out.is_dir()
    missing = [p for p in (out, *out.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        if existed:
            for child in list(out.iterdir()):
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        for folder in missing:  # innermost first
            shutil.rmtree(folder, ignore_errors=True) if folder == out else _rmdir(folder)
        raise


def _rmdir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _write_export(run: RunDir, out: Path, done: int, trained: dict, metrics: dict) -> None:
    """The export's files through the write guard: marker first, states, config, metrics, card, manifest last."""
    zone, files = Zone(out), {}

    def put(name: str, data: bytes) -> None:
        write_output(out / name, data, option="--out", zone=zone)
        files[name] = sha256_hex(data)
    marker = read_marker(run.root)
    head = {"format": FORMAT, "complete": False, "norga": __version__, "run_id": marker.run_id if marker else None,
            "tasks": done, "num_tasks": metrics.get("num_tasks"), "config_hash": config_hash(trained), "files": {}}
    put(MARKER, _json(head))
    method = trained["method"]["name"]
    for t in range(done):
        state, digest = _task_state(run, t, method)
        for name, data in state_files(t, state, method, digest).items():
            put(name, data)
    note = history_note(config_history_of(metrics))
    put("config.yaml", ((f"# {note}\n" if note else "") + yaml.safe_dump(trained, sort_keys=False)).encode())
    put("metrics.json", _json(metrics))
    put("README.md", model_card(trained, metrics, run.root, done).encode())
    del files[MARKER]
    write_output(out / MARKER, _json({**head, "complete": True, "files": dict(sorted(files.items()))}), "--out", zone)


def _json(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def export_run(run_dir: Path, out: Path) -> Tuple[int, dict]:
    """Write the export of ``run_dir`` into ``out`` (new or empty); (tasks exported, metrics). Nothing is left in
    ``out`` when it fails."""
    out = Path(out)
    _check_out(out)
    run, done, trained = trained_config(run_dir)
    metrics = _run_metrics(run, done)
    with _removed_on_failure(out):
        try:
            _write_export(run, out, done, trained, metrics)
        except OSError as err:
            raise ExportError(f"cannot write the export into {out}: {err}; give a writable --out") from err
    return done, metrics


# ---- evaluate an export -----------------------------------------------------------
def export_config(verified: VerifiedExport) -> Config:
    """The Config of a verified export folder."""
    try:
        return from_dict(Config, with_new_defaults(verified.config), "")
    except ConfigError as err:
        raise ConfigError(f"{verified.folder / 'config.yaml'}: {err}") from err


def evaluate_export(folder: Path, feature_cache: Optional[Path] = None,
                    verified: Optional[VerifiedExport] = None) -> dict:
    """Metrics of an export folder recomputed from its saved states (the run folder is not needed), after
    :func:`verify_export` (``verified``: its result, when the caller ran it); ``feature_cache`` as for
    :func:`~norga.engine.saved_states.evaluate_states`."""
    folder = Path(folder)
    verified = verified or verify_export(folder)
    cfg = export_config(verified)
    recorded = config_to_dict(cfg)
    return evaluate_states(cfg, verified.tasks, lambda method, t: (read_state(folder, t), recorded), feature_cache)


# ---- push ---------------------------------------------------------------------------
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_repo_id(repo: str) -> None:
    """``ORG/NAME`` (letters, digits, ``._-``), checked before anything is exported."""
    if not REPO_ID.match(repo or "") or ".." in repo or len(repo) > 96:
        raise ExportError(f"--push {repo!r}: expected a Hugging Face model repo id ORG/NAME, "
                          "e.g. my-lab/norga-cifar100")


def push_export(folder: Path, repo: str) -> str:
    """Verify ``folder`` (:func:`verify_export`), then upload its manifest and the files it lists to the Hugging
    Face Hub model repo ``repo`` (created if missing; needs a token; honours ``HF_ENDPOINT`` and
    ``HF_HUB_OFFLINE``); returns the commit URL. Any failure is one :class:`ExportError` line; after a failed
    upload it says the export itself is complete and how to retry the upload alone."""
    check_repo_id(repo)
    folder = Path(folder)
    listed = [MARKER, *sorted(verify_export(folder).files)]
    try:
        from huggingface_hub import HfApi, get_token
    except ImportError as err:
        raise ExportError("--push needs huggingface_hub: pip install huggingface_hub") from err
    retry = f"the export in {folder} is complete; upload it later with `hf upload {repo} {folder} .`"
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        raise ExportError(f"--push: HF_HUB_OFFLINE is set, nothing was uploaded ({retry})")
    if not (os.environ.get("HF_TOKEN") or get_token()):
        raise ExportError("--push needs a Hugging Face token: run `huggingface-cli login` or set HF_TOKEN "
                          f"(the export in {folder} is complete)")
    api = HfApi()
    try:
        api.create_repo(repo, exist_ok=True, repo_type="model")
        return str(api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model", allow_patterns=listed,
                                     commit_message=f"norga export of {folder.name}"))
    except Exception as err:  # network, HTTP (401/403/404/5xx), offline mode: all end the same way
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ExportError(f"--push to {repo} failed: {type(err).__name__}: {first} ({retry})") from err
