"""What a run's tasks were trained on besides their config: the backbone weights file and the data split.

Every checkpoint records ``inputs: {"backbone_sha256_16", "split_sha256"}``: the first 16 hex digits of the sha256
of the local weights file the config's ``model`` section names (None: random init, or weights timm fetches by
tag), and the data's ``info["split_sha256"]`` (folder datasets, :mod:`norga.data.folders`; None for the others).
Both can change behind an unchanged config: new weights saved at the same path, an unreadable image deleted.

* resuming (:class:`InputsCheck`) compares them with what the last saved task recorded: a change is one
  RunError naming both checksums, before anything is written; with ``--force`` the remaining tasks train with
  the new inputs and the change is a warning in ``log.txt``;
* ``metrics.json`` records the inputs of its tasks (:func:`with_inputs`): ``inputs_history`` (one entry per
  stretch of tasks with the same inputs, from the second on with ``changed``), ``mixed_inputs`` when there is
  more than one, and ``backbone.checkpoint_sha256_16`` is the one the last task recorded;
* ``norga eval --run`` refuses weights that are not those its checkpoints record (:func:`check_eval_weights`).

A checkpoint of an older norga records no inputs: nothing is compared with it. This module imports no torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..errors import NorgaError, RunError
from ..files import sha256_file

KEYS = ("backbone_sha256_16", "split_sha256")
WHAT = {"backbone_sha256_16": "the backbone weights", "split_sha256": "the data split (data.root's image list)"}
FIX = {"backbone_sha256_16": "put back the weights the run was trained with",
       "split_sha256": "restore the images under data.root the run was trained on"}


def weights_checksum(model) -> Tuple[Optional[str], Optional[str]]:
    """(local weights file of the config's ``model`` section, first 16 hex digits of its sha256); the checksum is
    None when there is no such file (random init, timm-tag weights) or it is not there yet (built later)."""
    from ..models.hub_weights import weights_file

    try:
        path = weights_file(model)
    except NorgaError:  # a Hub file not in the cache yet: building the backbone downloads it
        return None, None
    if not path or not Path(path).is_file():
        return path, None
    return path, sha256_file(Path(path))[:16]


def _tasks(first: int, last: int) -> str:
    return f"task {first}" if first == last else f"tasks {first}-{last}"


class InputsCheck:
    """The inputs a run trains with (hashed once per process), checked against those of its last saved task."""

    def __init__(self, run, model, num_tasks: int, force: bool):
        self.run, self.model, self.num_tasks, self.force = run, model, num_tasks, force
        self.notes: List[str] = []  # warnings for the log (a change accepted with --force)
        self.values = {"split_sha256": None}
        self.path: Optional[str] = None

    def _backbone(self) -> Optional[str]:
        if "backbone_sha256_16" not in self.values:
            self.path, self.values["backbone_sha256_16"] = weights_checksum(self.model)
        return self.values["backbone_sha256_16"]

    def check_backbone(self, done: int) -> None:
        """Before building: the weights file against task ``done - 1``'s record (when a task is left to train)."""
        if 0 < done < self.num_tasks and self._recorded(done, "backbone_sha256_16") is not None:
            self._compare("backbone_sha256_16", done, self._backbone(), f" {self.path}")

    def check_split(self, done: int, info: dict) -> None:
        """After building the data (every process): its split checksum against task ``done - 1``'s record."""
        self.values["split_sha256"] = info.get("split_sha256")
        if 0 < done < self.num_tasks:
            self._compare("split_sha256", done, self.values["split_sha256"], "")

    def record(self) -> dict:
        """What the checkpoints this process saves record (``inputs``)."""
        return {"backbone_sha256_16": self._backbone(), "split_sha256": self.values["split_sha256"]}

    def _recorded(self, done: int, key: str) -> Optional[str]:
        return (self.run.record(done - 1).get("inputs") or {}).get(key)

    def _compare(self, key: str, done: int, now: Optional[str], where: str) -> None:
        recorded = self._recorded(done, key)
        if recorded is None or now is None or recorded == now:
            return
        change = (f"{WHAT[key]}{where} changed since task {done - 1} was trained (sha256 {recorded[:16]} recorded "
                  f"in checkpoints/task_{done - 1:02d}.pt, {now[:16]} now)")
        rest = _tasks(done, self.num_tasks - 1)
        if not self.force:
            raise RunError(f"{self.run.root}: {change}; nothing was written: {FIX[key]}, or use --force to train "
                           f"{rest} with them (recorded in metrics.json: inputs_history, mixed_inputs), or use a new "
                           "--output-dir")
        self.notes.append(f"warning: --force: {change}; {rest} train with them; metrics.json records the change "
                          "(inputs_history, mixed_inputs: true)")


def inputs_history(inputs: Sequence[Optional[dict]]) -> List[dict]:
    """Per stretch of consecutive tasks with the same inputs: ``{"tasks": [first, last], KEY: value ...}``, plus
    ``"changed": {KEY: [old, new]}`` from the second on. ``inputs``: each task's record (None or a None value:
    not recorded, which matches any)."""
    history: List[dict] = []
    for task, record in enumerate(inputs):
        values = {k: (record or {}).get(k) for k in KEYS}
        last = history[-1] if history else None
        if last and all(last[k] is None or values[k] is None or last[k] == values[k] for k in KEYS):
            last["tasks"][1] = task
            last.update({k: last[k] or values[k] for k in KEYS})
            continue
        entry = {"tasks": [task, task], **values}
        if last:
            entry["changed"] = {k: [last[k], values[k]] for k in KEYS if last[k] != values[k]}
        history.append(entry)
    return history


def with_inputs(metrics: dict, inputs: Sequence[Optional[dict]]) -> dict:
    """``metrics`` with the inputs its tasks' checkpoints record (module doc)."""
    history = inputs_history(inputs)
    out = {**metrics, "inputs_history": history, "mixed_inputs": len(history) > 1}
    last = history[-1]["backbone_sha256_16"] if history else None
    if last and isinstance(out.get("backbone"), dict):
        out["backbone"] = {**out["backbone"], "checkpoint_sha256_16": last}
    return out


def check_eval_weights(run, done: int, model) -> None:
    """RunError when the weights file the config names is not the one checkpoints 0..done-1 were trained with."""
    recorded = [(t, (run.record(t).get("inputs") or {}).get("backbone_sha256_16")) for t in range(done)]
    recorded = [(t, value) for t, value in recorded if value]
    if not recorded:
        return
    path, now = weights_checksum(model)
    for task, value in recorded:
        if now is not None and value != now:
            raise RunError(f"{run.root}: the backbone weights {path} changed since task {task} was trained (sha256 "
                           f"{value} recorded in checkpoints/task_{task:02d}.pt, {now} now): an evaluation with them "
                           "would not be this run's; put back the weights the run was trained with")
