"""What the GPU check's machine has besides torch, torchvision and timm: optional packages, C compilers, Python
headers, and what a step that needs one of them should say when it is missing.

A bare GPU machine (issue #68) may have none of matplotlib, scikit-learn, SciPy, TensorBoard, gcc or the Python
headers; a step (or one smoke run) that needs one is ``skipped`` with the missing thing named, never ``failed``.
Presence is probed with :func:`importlib.util.find_spec`, which honours a module hidden as ``sys.modules[name] =
None`` (the bare-box rehearsal, :mod:`bench.gpu_check_barebox`), without importing the package.
"""
from __future__ import annotations

import importlib.util
import shutil
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional

import torch

# import name -> distribution name (what a user would install), for the optional packages the check can meet
OPTIONAL_PACKAGES = {"matplotlib": "matplotlib", "sklearn": "scikit-learn", "scipy": "scipy",
                     "tensorboard": "tensorboard", "triton": "triton"}
COMPILERS = ("gcc", "cc", "g++", "clang")


class StepSkipped(Exception):
    """Raised by a step that cannot run here for want of ``missing`` (packages, a compiler, headers)."""

    def __init__(self, reason: str, missing: List[str]):
        super().__init__(reason)
        self.reason, self.missing = reason, list(missing)


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported (False for a hidden or absent module, without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def package_versions() -> Dict[str, Optional[str]]:
    """``{distribution: version or None}`` of the optional packages (None: not importable here)."""
    out = {}
    for module, dist in OPTIONAL_PACKAGES.items():
        if not has_module(module):
            out[dist] = None
            continue
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "present"
    return out


def compilers() -> Dict[str, Optional[str]]:
    """``{name: path or None}`` of the C/C++ compilers on PATH (Inductor and Triton build with one)."""
    return {name: shutil.which(name) for name in COMPILERS}


def python_headers() -> Dict[str, object]:
    """The include folder of this Python and whether ``Python.h`` is in it (Triton's launcher needs it)."""
    include = sysconfig.get_paths().get("include") or ""
    return {"include": include, "present": bool(include) and (Path(include) / "Python.h").is_file()}


def optional_module_of(err: BaseException) -> Optional[str]:
    """The optional package (distribution name) an ImportError is about, or None for any other import error."""
    name = getattr(err, "name", None) or ""
    top = name.split(".")[0]
    return OPTIONAL_PACKAGES.get(top)


def missing_reason(dist: str) -> str:
    """The skip reason of something that needs the optional package ``dist``."""
    return f"needs {dist}, which is not installed here (optional: the step is skipped, not failed)"


def compile_missing(device: torch.device, backend: str) -> List[str]:
    """What ``torch.compile`` with ``backend`` on ``device`` needs and this machine lacks (empty: it can try).

    Inductor builds C++ (CPU) or Triton (CUDA) code: it needs a C compiler and, for Triton's launcher, the Python
    headers; other backends (``eager``, the --tiny path) need nothing."""
    if backend != "inductor":
        return []
    missing = []
    if not any(compilers()[name] for name in ("gcc", "cc", "clang")):
        missing.append("a C compiler (gcc/cc)")
    if not python_headers()["present"]:
        missing.append("the Python headers (Python.h)")
    if device.type == "cuda" and not has_module("triton"):
        missing.append("triton")
    return missing


def environment_extras() -> dict:
    """The environment step's record of optional packages, compilers and headers."""
    return {"optional_packages": package_versions(), "compilers": compilers(), "python_headers": python_headers()}
