"""Per-epoch training log: one JSON line per epoch per stage, optional TensorBoard, task ETA.

The runner opens the log for a run; training code anywhere reports an epoch
with one call, which is a no-op when no log is open (unit tests, notebooks)::

    with epoch_log(run_dir, tensorboard=False, completed_tasks=done):   # runner
        ...
        log_epoch(stage="wtp", task=t, epoch=e, lr=lr, loss=0.83, ce=0.80, reg=0.03,
                  alpha=[...], tau=[...])                                  # a stage

File ``DIR/epochs.jsonl`` (UTF-8, one JSON object per line, appended and
flushed after every epoch). Keys of a line:

=========== ==========================================================================
``stage``   str: the training stage; the pipeline uses ``tii`` (TII head, CE),
            ``tii_align`` (eq. 59), ``wtp`` (prompt + head, eq. 57), ``tap`` (eq. 58)
            and ``head`` (the no-prompt reference's head)
``task``    int, 0-based task index (as the rows of ``metrics.json``'s matrices and
            ``checkpoints/task_XX.pt``)
``epoch``   int, 0-based epoch index within (stage, task)
``elapsed`` float, wall-clock seconds since the log was opened by this process
``time``    float, Unix time (seconds) when the line was written
``loss``    float, mean training loss over the epoch's batches (when reported)
``lr``      float, or list of floats per optimizer parameter group (when reported)
``steps``   int, optimizer steps (batches) in the epoch (when reported)
``alpha``,  lists of floats, NoRGa's alpha / tau per prompted layer (when reported)
``tau``
(others)    further loss terms given by the caller, e.g. ``ce`` (cross-entropy) and
            ``reg`` (lambda-weighted contrastive regulariser), floats
=========== ==========================================================================

Tensors and numpy numbers are converted to floats (lists for non-scalars).
On resume (``completed_tasks=k``) the lines of unfinished tasks (``task >= k``)
are dropped first, so a resumed run's file has exactly one line per epoch per
stage, like an uninterrupted one. With ``tensorboard=True`` every numeric key is
also written as a TensorBoard scalar ``<stage>/<key>`` (step = the stage's running
epoch count over tasks) into ``DIR/tensorboard/`` (needs the ``tensorboard``
package: ``pip install "norga[tensorboard]"``).
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from ..config import ConfigError
from ..outputs import Zone, check_output, make_output_folder, write_output

FILENAME = "epochs.jsonl"
_current: Optional["EpochLog"] = None


class TensorBoardMissing(ConfigError):
    """``logging.tensorboard: true`` but the tensorboard package is not installed."""


def _plain(value: Any) -> Any:
    """Tensors / numpy values / sequences of them -> float, int, str or (nested) lists."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if hasattr(value, "tolist"):  # torch.Tensor, numpy array or scalar
        return _plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return float(value)


def read_epoch_log(path: Path) -> List[Dict[str, Any]]:
    """Records of an ``epochs.jsonl`` file (a folder means ``folder/epochs.jsonl``).

    Missing file -> []. A truncated last line (a run killed while writing) is skipped.
    """
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class EpochLog:
    """Appends epoch records to ``run_dir/epochs.jsonl`` (and TensorBoard if asked)."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, completed_tasks: Optional[int] = None,
                 trackers=None):
        self.path = Path(run_dir) / FILENAME
        self._zone = Zone(Path(run_dir), frozenset({FILENAME}))  # appended to: checked once by the write guard
        check_output(self.path, "--output-dir", self._zone)
        make_output_folder(self.path.parent)
        kept = self._drop_unfinished(completed_tasks)
        self._steps: Dict[str, int] = {}
        for record in kept:
            stage = str(record.get("stage"))
            self._steps[stage] = self._steps.get(stage, 0) + 1
        self._writer = _summary_writer(Path(run_dir) / "tensorboard") if tensorboard else None
        self._trackers = trackers  # a norga.toolkit.trackers.TrackerSet (its scalars(values, step)) or None
        self._file = open(self.path, "a", encoding="utf-8")  # guarded: appended to, checked above
        self._start = time.time()

    def _drop_unfinished(self, completed_tasks: Optional[int]) -> List[Dict[str, Any]]:
        """Keep the well-formed lines of tasks < ``completed_tasks`` (all tasks if None)."""
        limit = math.inf if completed_tasks is None else completed_tasks
        records = read_epoch_log(self.path)
        kept = [r for r in records if isinstance(r.get("task"), int) and r["task"] < limit]
        if self.path.is_file():  # rewritten whole: also drops a line truncated by a kill
            text = "".join(json.dumps(r) + "\n" for r in kept)
            write_output(self.path, text.encode("utf-8"), "--output-dir", self._zone)
        return kept

    def write(self, stage: str, task: int, epoch: int, **values: Any) -> Dict[str, Any]:
        """Append one line; returns the record written."""
        now = time.time()
        record = {"stage": str(stage), "task": int(task), "epoch": int(epoch),
                  "elapsed": round(now - self._start, 3), "time": round(now, 3)}
        record.update({k: _plain(v) for k, v in values.items() if v is not None})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._writer is not None or self._trackers is not None:
            self._write_scalars(record)
        return record

    def _write_scalars(self, record: Dict[str, Any]) -> None:
        stage = record["stage"]
        step = self._steps.get(stage, 0)
        self._steps[stage] = step + 1
        scalars = {}
        for key, value in record.items():
            if key in ("stage", "epoch", "time", "elapsed"):
                continue
            values = value if isinstance(value, list) else [value]
            for i, v in enumerate(values):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    tag = f"{stage}/{key}" + (f"/{i}" if isinstance(value, list) else "")
                    scalars[tag] = v
        for tag, v in scalars.items():
            if self._writer is not None:
                self._writer.add_scalar(tag, v, step)
        if self._trackers is not None:
            self._trackers.scalars(scalars, step)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()


def _summary_writer(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch raises ImportError when tensorboard is absent
        raise TensorBoardMissing(
            "logging.tensorboard is true but the 'tensorboard' package is not installed: "
            "pip install tensorboard (or pip install -e \".[tensorboard]\"), or set logging.tensorboard=false"
        ) from err
    return SummaryWriter(log_dir=str(folder))


@contextlib.contextmanager
def epoch_log(run_dir: Path, tensorboard: bool = False, completed_tasks: Optional[int] = None,
              trackers=None) -> Iterator[EpochLog]:
    """Open the run's epoch log and make it the current one for :func:`log_epoch` (its scalars also go to
    ``trackers``, a :class:`norga.toolkit.trackers.TrackerSet`, when given)."""
    global _current
    log = EpochLog(run_dir, tensorboard=tensorboard, completed_tasks=completed_tasks, trackers=trackers)
    previous, _current = _current, log
    try:
        yield log
    finally:
        _current = previous
        log.close()


def log_epoch(stage: str, task: int, epoch: int, **values: Any) -> Optional[Dict[str, Any]]:
    """Report one finished epoch to the open log (see the module docstring for keys).

    A no-op returning None when no log is open.
    """
    if _current is None:
        return None
    return _current.write(stage, task, epoch, **values)


def current_log() -> Optional[EpochLog]:
    return _current


def _duration(seconds: float) -> str:
    """1234.5 -> '20m35s'; 5000 -> '1h23m'."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(task_seconds: Sequence[float], num_tasks: int) -> str:
    """Overall progress after ``len(task_seconds)`` finished tasks, with an ETA.

    ``task_seconds``: wall seconds of every finished task (this and earlier
    sessions); the ETA is the mean of those times x the tasks left.
    """
    done = len(task_seconds)
    spent = float(sum(task_seconds))
    left = num_tasks - done
    if done == 0 or not math.isfinite(spent):
        return f"progress: 0/{num_tasks} tasks done"
    eta = spent / done * left
    tail = f"ETA {_duration(eta)}" if left else "finished"
    return (f"progress: {done}/{num_tasks} tasks done ({100 * done / num_tasks:.0f}%), "
            f"{_duration(spent)} spent, {_duration(spent / done)}/task, {tail}")
