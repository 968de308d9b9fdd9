"""Helpers of a run folder that hold no run state: the code's version, the first non-finite value of the metrics,
and a log file that warns once instead of raising (moved out of :mod:`norga.engine.run_folder`, which re-exports
them)."""
from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Optional


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """norga version and, in a git checkout, the commit of the code (``git_dirty``: uncommitted changes)."""
    from .._version import __version__

    root = Path(__file__).resolve().parents[2]
    info = {"version": __version__, "git_commit": None, "git_dirty": None}
    if not (root / ".git").exists():
        return info
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10)
        head = git("rev-parse", "HEAD")
        if head.returncode == 0:
            info["git_commit"] = head.stdout.strip()
            info["git_dirty"] = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def non_finite_key(obj, path: str = "") -> Optional[str]:
    """Key path of the first NaN/inf float in nested dicts/lists, e.g. 'acc_matrix[1][2]'."""
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        return path or "(top level)"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = non_finite_key(value, f"{path}.{key}" if isinstance(obj, dict) and path else
                               str(key) if isinstance(obj, dict) else f"{path}[{key}]")
        if found:
            return found
    return None


def run_logger(root: Path) -> logging.Logger:
    """Logger of the run folder ``root``: writes to its log.txt (appending across resumes) and to stdout."""
    root.mkdir(parents=True, exist_ok=True)
    log = logging.getLogger(f"norga.run.{root.resolve()}")
    if not log.handlers:
        log.setLevel(logging.INFO)
        fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
        for handler in (QuietFileHandler(root / "log.txt"), logging.StreamHandler(sys.stdout)):
            handler.setFormatter(fmt)
            log.addHandler(handler)
        log.propagate = False
    return log


class QuietFileHandler(logging.FileHandler):
    """A log file that, when it cannot be written (disk full), warns once on stderr instead of a traceback."""

    _warned = False

    def handleError(self, record) -> None:  # noqa: N802 - logging's name
        if not self._warned:
            self._warned = True
            print(f"warning: cannot write {self.baseFilename} ({sys.exc_info()[1]}); log lines are skipped",
                  file=sys.stderr)
