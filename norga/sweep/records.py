"""A command's exit record and log: ``LOGS/<point>/seed<S>/exit.json`` and ``train.log`` beside it (one folder per
run, so one writer at a time). The run folder says what was trained; the exit record says only how the last
command on it ended, so that a point whose command failed before it saved anything is ``failed``, not ``missing``.
Torch-free.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Optional

from ..outputs import OutputRefused, make_output_folder, write_output, zone_of

RECORD_FORMAT = "norga-sweep-exit/1"
RECORD_NAME = "exit.json"
# exit statuses of a command that was stopped (Ctrl-C, SIGTERM, a time limit, preemption, killed), not failed
STOPPED = {130, 143, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL, -signal.SIGUSR1, -signal.SIGUSR2}


def write_exit_record(path: Path, returncode: Optional[int], log: Path) -> Path:
    """Write ``{format, returncode, error, time}`` to ``path`` through the write guard; ``error``: the last
    ``error:`` line of ``log`` (empty when there is none)."""
    data = {"format": RECORD_FORMAT, "returncode": returncode, "error": last_error_line(log),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return write_output(Path(path), (json.dumps(data, indent=1) + "\n").encode(), "--out")


def read_exit_record(path: Path) -> Optional[dict]:
    """The exit record at ``path``, or None when absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == RECORD_FORMAT else None


def failure(record: Optional[dict]) -> Optional[str]:
    """Why the recorded command failed (``exit 2: error: ...``), or None when it succeeded or was stopped."""
    if record is None or record.get("returncode") in (0, None) or record.get("returncode") in STOPPED:
        return None
    return f"exit {record['returncode']}" + (f": {record['error']}" if record.get("error") else "")


def last_error_line(log: Path, tail: int = 65536) -> str:
    """The last line of ``log`` that starts with ``error:`` (read from its last ``tail`` bytes), or ''."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.startswith("error:")]
    return lines[-1][:500] if lines else ""


def prepare_log(log: Path, option: str = "--out") -> Path:
    """Create ``log``'s folder through the write guard and check it lies in no norga zone (a run folder, an
    export, a feature store); the log itself is appended to by its command."""
    found = zone_of(Path(log).parent) if Path(log).parent.exists() else None
    if found is not None:
        raise OutputRefused(f"{option} {log} lies inside the {found[1]} {found[0]}, whose files norga manages; "
                            f"choose another {option}")
    make_output_folder(Path(log).parent, option)
    return Path(log)
