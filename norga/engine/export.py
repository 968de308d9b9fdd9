"""Export a trained run to a self-contained folder, evaluate such an export, push it to the Hugging Face Hub.

An export folder (``norga export --run RUN --out DIR``) holds

* ``state/task_XX.safetensors``: every tensor of the method's state after task XX (prompts, gates, heads,
  adapters, statistics: whatever :meth:`~norga.methods.base.Method.state_dict` keeps), keyed by position;
* ``state/task_XX.json``: the rest of that state (numbers, lists, strings), tensors replaced by their key;
* ``config.yaml`` (the resolved config the checkpoints were trained with), ``metrics.json`` and a model card
  ``README.md``.

Every task's state is kept, not only the last one's, so that ``norga eval --from DIR`` recomputes the run's
whole accuracy matrix (row t is evaluated with the state after task t) without the run folder.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
import yaml

from ..config import Config, ConfigError, config_to_dict, from_dict
from ..errors import NorgaError
from ..files import atomic_write_bytes
from .provenance import with_new_defaults
from .run_identity import trained_config
from .saved_states import evaluate_states


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


def join_state(skeleton: Any, tensors: Dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`split_state`."""
    if isinstance(skeleton, list):
        return [join_state(v, tensors) for v in skeleton]
    if not isinstance(skeleton, dict):
        return skeleton
    if "__tensor__" in skeleton:
        return tensors[skeleton["__tensor__"]]
    if "__tuple__" in skeleton:
        return tuple(join_state(v, tensors) for v in skeleton["__tuple__"])
    return {join_state(k, tensors): join_state(v, tensors) for k, v in skeleton["__dict__"]}


def _write_state(folder: Path, task: int, state: dict) -> None:
    from safetensors.torch import save_file

    tensors: Dict[str, torch.Tensor] = {}
    skeleton = split_state(state, tensors)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / f"task_{task:02d}.safetensors"))
    atomic_write_bytes(folder / f"task_{task:02d}.json", (json.dumps(skeleton) + "\n").encode(), option="--out")


def read_state(folder: Path, task: int) -> dict:
    """The method state after ``task`` of an export's ``state/`` folder."""
    from safetensors.torch import load_file

    tensors_path, json_path = folder / f"task_{task:02d}.safetensors", folder / f"task_{task:02d}.json"
    if not tensors_path.is_file() or not json_path.is_file():
        raise ExportError(f"{folder.parent} is not a complete norga export: {tensors_path.name} or "
                          f"{json_path.name} is missing; export the run again (norga export)")
    return join_state(json.loads(json_path.read_text()), load_file(str(tensors_path)))


# ---- export --------------------------------------------------------------------
def backbone_checksum(backbone: dict) -> str:
    """The checksum metrics.json recorded for the weights the run was trained with (a local file or a Hub
    file: first 16 hex digits of its sha256), or what the weights are when there was no such file."""
    if backbone.get("checkpoint_sha256_16"):
        return f"{backbone['checkpoint_sha256_16']} (first 16 hex digits)"
    return "timm pretrained weights" if backbone.get("pretrained") else "none (randomly initialised backbone)"


def model_card(cfg: dict, metrics: dict, run_dir: Path) -> str:
    """README.md of an export: method, backbone and checksum, benchmark, seed, FA/CA/FM, how to reproduce."""
    model, data = cfg.get("model", {}), cfg.get("data", {})
    backbone = model.get("name") or model.get("preset") or "?"

    def number(key: str) -> str:
        value = metrics.get(key)
        return f"{value:.4f}" if isinstance(value, (int, float)) else "n/a"
    return "\n".join([
        "---", "library_name: norga", "tags: [continual-learning, class-incremental, vision-transformer]", "---",
        f"# {cfg.get('method', {}).get('name')} on {data.get('name')} (norga export)", "",
        "| | |", "|---|---|",
        f"| method | {cfg.get('method', {}).get('name')} |",
        f"| backbone | {backbone} (checkpoint: {model.get('checkpoint')}) |",
        f"| backbone sha256 | {backbone_checksum(metrics.get('backbone', {}))} |",
        f"| benchmark | {data.get('name')}, {data.get('num_tasks')} tasks |",
        f"| seed | {cfg.get('seed')} |",
        f"| FA / CA / FM | {number('FA')} / {number('CA')} / {number('FM')} |",
        f"| tasks trained | {metrics.get('completed_tasks')} of {metrics.get('num_tasks')} |", "",
        "Evaluate this export (same accuracy matrix as metrics.json): `norga eval --from THIS_FOLDER`", "",
        f"Reproduce the training: `norga train --config config.yaml --output-dir {run_dir.name}`", "",
    ])


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"--out {out} exists and is not an empty folder; give a new folder")


def export_run(run_dir: Path, out: Path) -> Tuple[int, dict]:
    """Write the export of ``run_dir`` into ``out`` (new or empty); (tasks exported, metrics)."""
    _check_out(out)
    run, done, trained = trained_config(run_dir)
    metrics = run.read_metrics()
    if metrics is None:
        raise ExportError(f"{run_dir}/metrics.json is missing or unreadable; run norga train on the folder again "
                          "to rebuild it, then export")
    states = []
    for t in range(done):
        saved = run.load_checkpoint(t)
        if saved.get("method_name") != trained["method"]["name"] or not isinstance(saved.get("method"), dict):
            raise ExportError(f"{run_dir}: checkpoint of task {t} is not one of method {trained['method']['name']}")
        states.append(saved["method"])
    try:
        out.mkdir(parents=True, exist_ok=True)
        for t, state in enumerate(states):
            _write_state(out / "state", t, state)
        atomic_write_bytes(out / "config.yaml", yaml.safe_dump(trained, sort_keys=False).encode(), option="--out")
        atomic_write_bytes(out / "metrics.json", (json.dumps(metrics, indent=2) + "\n").encode(), option="--out")
        atomic_write_bytes(out / "README.md", model_card(trained, metrics, Path(run_dir)).encode(), option="--out")
    except OSError as err:
        raise ExportError(f"cannot write the export into {out}: {err}; give a writable --out") from err
    return done, metrics


# ---- evaluate an export -----------------------------------------------------------
def export_config(folder: Path) -> Config:
    """The Config of an export folder."""
    path = Path(folder) / "config.yaml"
    if not path.is_file():
        raise ExportError(f"{folder} is not a norga export (no config.yaml); give a folder written by norga export")
    try:
        return from_dict(Config, with_new_defaults(yaml.safe_load(path.read_text())), "")
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err


def evaluate_export(folder: Path, feature_cache: Optional[Path] = None) -> dict:
    """Metrics of an export folder recomputed from its saved states (the run folder is not needed);
    ``feature_cache`` as for :func:`~norga.engine.saved_states.evaluate_states`."""
    folder = Path(folder)
    cfg = export_config(folder)
    tasks = len(sorted((folder / "state").glob("task_*.safetensors")))
    if tasks == 0:
        raise ExportError(f"{folder} holds no saved state (state/task_00.safetensors); export the run again")
    recorded = config_to_dict(cfg)
    return evaluate_states(cfg, tasks, lambda method, t: (read_state(folder / "state", t), recorded), feature_cache)


# ---- push ---------------------------------------------------------------------------
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_repo_id(repo: str) -> None:
    """``ORG/NAME`` (letters, digits, ``._-``), checked before anything is exported."""
    if not REPO_ID.match(repo or "") or ".." in repo or len(repo) > 96:
        raise ExportError(f"--push {repo!r}: expected a Hugging Face model repo id ORG/NAME, e.g. my-lab/norga-cifar100")


def push_export(folder: Path, repo: str) -> str:
    """Upload ``folder`` to the Hugging Face Hub model repo ``repo`` (created if missing; needs a token; honours
    ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE``); returns the commit URL. Any failure is one :class:`ExportError` line
    that says the export itself is complete and how to retry the upload alone."""
    check_repo_id(repo)
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
        return str(api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                     commit_message=f"norga export of {folder.name}"))
    except Exception as err:  # network, HTTP (401/403/404/5xx), offline mode: all end the same way
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ExportError(f"--push to {repo} failed: {type(err).__name__}: {first} ({retry})") from err
