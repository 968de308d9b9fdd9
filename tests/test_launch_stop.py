"""The local launcher's stop path: SIGTERM (a scheduler, ``kill``) or Ctrl-C to the process that called
:func:`norga.sweep.launchers.launch` stops every command it started and starts no more, whether that process is a
norga command (inside the error boundary) or a user's script calling the library (``norga tune``'s coordinator in
``studies/equal_budget/run.py``). Without it the coordinator died alone and its workers kept running."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHILD = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
SCRIPT = """
import sys
from pathlib import Path
from norga.sweep.launchers import launch
root = Path(sys.argv[1])
commands = [[sys.executable, "-c", {child!r}, str(root / f"pid{{i}}")] for i in range(3)]
launch(commands, launcher="local", jobs=2, log_dir=root / "logs")
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_library_caller_stops_the_commands_it_launched_and_starts_no_more(signum, tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(SCRIPT.format(child=CHILD))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    caller = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, stderr=subprocess.PIPE)
    pids = [tmp_path / "pid0", tmp_path / "pid1"]
    try:
        assert wait_for(lambda: all(p.is_file() and p.read_text() for p in pids), 60), "the two commands never started"
        children = [int(p.read_text()) for p in pids]
        caller.send_signal(signum)  # the caller only, as `kill PID` or a scheduler would: not its process group
        caller.wait(timeout=30)
        assert wait_for(lambda: not any(alive(pid) for pid in children), 30), "a launched command outlived its caller"
        assert not (tmp_path / "pid2").exists(), "a command was started after the stop"
    finally:
        caller.kill()
        for p in pids:
            if p.is_file() and p.read_text():
                try:
                    os.kill(int(p.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
