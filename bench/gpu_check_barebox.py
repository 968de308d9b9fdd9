"""Rehearse the GPU check on a bare machine: only torch, torchvision, timm and norga's hard runtime dependencies.

    python -m bench.gpu_check_barebox --device cpu --tiny --out runs/gpu_check_bare   # any bench.gpu_check args

runs ``python -m bench.gpu_check ARGS`` in a child process started from the checkout with ``PYTHONPATH`` (no
install), where a ``sitecustomize`` on ``PYTHONPATH`` hides :data:`HIDDEN` (``sys.modules[name] = None``: an
``import`` raises ``ModuleNotFoundError`` and ``importlib.util.find_spec`` says absent, as on a machine without
them). The check's workers inherit ``PYTHONPATH``, so they see the same bare environment.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
# the optional packages a bare GPU machine may lack (import names)
HIDDEN = ("matplotlib", "sklearn", "scipy", "tensorboard")
SITE = '''"""Hides optional packages for the GPU check's bare-box rehearsal (bench/gpu_check_barebox.py)."""
import sys

for _name in {hidden!r}:
    sys.modules[_name] = None  # import raises ModuleNotFoundError; importlib.util.find_spec returns None
'''


def write_site(folder: Path, hidden: Sequence[str] = HIDDEN) -> Path:
    """Write ``folder/sitecustomize.py`` hiding ``hidden``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITE.format(hidden=tuple(hidden)))
    return folder


def bare_env(site: Path, base: Dict[str, str] = None) -> Dict[str, str]:
    """``base`` (default: this environment) with ``PYTHONPATH`` = the hiding folder, then the checkout only."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    env.pop("PYTHONSTARTUP", None)
    return env


def command(args: Sequence[str]) -> List[str]:
    return [sys.executable, "-m", "bench.gpu_check", *args]


def run(args: Sequence[str], site: Path, timeout: float = None, extra_env: Dict[str, str] = None,
        **kwargs) -> subprocess.CompletedProcess:
    """``python -m bench.gpu_check ARGS`` from the checkout in the bare environment (with ``extra_env``)."""
    return subprocess.run(command(args), cwd=REPO, env={**bare_env(site), **(extra_env or {})}, timeout=timeout,
                          **kwargs)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    with tempfile.TemporaryDirectory(prefix="gpu_check_bare_") as tmp:
        site = write_site(Path(tmp))
        print(f"[barebox] hiding {', '.join(HIDDEN)}; PYTHONPATH={bare_env(site)['PYTHONPATH']}", flush=True)
        return run(argv, site).returncode


if __name__ == "__main__":
    raise SystemExit(main())
