"""Is this Python environment able to run norga? Versions, builds and devices, for ``norga doctor`` and every command.

Importing this module is torch-free; :func:`check_environment` (called by ``norga train``/``eval``/``routes``
before they load the engine) imports torch, torchvision and timm and turns a failed import into one line
naming the fix; ``norga doctor`` also warns about a torch/torchvision pairing that imports but breaks the
rules below. The classic failure: a CPU build of torch beside a CUDA build of torchvision (what
``pip install torchvision`` leaves when the CPU index was not used for it), which makes ``import
torchvision`` die with ``operator torchvision::nms does not exist``.

Rules (torch 2.x): torchvision's minor version is torch's minor + 15 (torch 2.5 <-> torchvision 0.20), and
both carry the same build tag (``+cpu``, ``+cu124``; none for the default PyPI builds).
"""
from __future__ import annotations

import importlib
import importlib.metadata as metadata
import platform
import re
from typing import Dict, List, Optional, Tuple

from ..errors import NorgaError

PACKAGES = ("torch", "torchvision", "timm")
TORCHVISION_MINOR_OFFSET = 15  # torch 2.N pairs with torchvision 0.(N + 15)


class EnvironmentProblem(NorgaError):
    """torch / torchvision / timm are missing, mismatched or cannot be imported (message: the fix)."""


def installed_versions() -> Dict[str, Optional[str]]:
    """Package -> installed version string (with its build tag, e.g. '2.5.1+cpu'), None when not installed."""
    versions: Dict[str, Optional[str]] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _split(version: str) -> Tuple[Tuple[int, ...], str]:
    """'2.5.1+cu124' -> ((2, 5, 1), 'cu124'); '0.20.1' -> ((0, 20, 1), '')."""
    public, _, tag = version.partition("+")
    numbers = tuple(int(n) for n in re.findall(r"\d+", public)[:3])
    return numbers, tag


def matching_torchvision(torch_version: str) -> Optional[str]:
    """The torchvision release series ('0.20.*') that pairs with a torch 2.x version, else None."""
    (major, minor, *_), _tag = _split(torch_version)
    return f"0.{minor + TORCHVISION_MINOR_OFFSET}.*" if major == 2 else None


def install_hint(torch_version: str) -> str:
    """The pip command installing the torchvision that matches ``torch_version`` (same build index)."""
    series, tag = matching_torchvision(torch_version), _split(torch_version)[1]
    spec = f"torchvision=={series}" if series else "torchvision"
    index = f" --index-url https://download.pytorch.org/whl/{tag}" if tag else ""
    return f"pip install --force-reinstall --no-deps '{spec}'{index}"


def fix_hint(torch_version: str) -> str:
    """:func:`install_hint`, and for a torch of a build index (``+cpu``, ``+cu124``) also the install that needs no
    such index: torch and the matching torchvision together from the configured one (PyPI's default builds
    pair with each other, so ``norga doctor`` is then satisfied)."""
    (major, minor, *_), tag = _split(torch_version)
    series = matching_torchvision(torch_version)
    if not tag or not series:
        return install_hint(torch_version)
    return (f"{install_hint(torch_version)}; or, if that index cannot be reached, the pair from your configured "
            f"index: pip install --force-reinstall 'torch=={major}.{minor}.*' 'torchvision=={series}'")


def version_problems(versions: Dict[str, Optional[str]]) -> List[str]:
    """What is wrong with these installed versions (empty when nothing), each naming the fix. Torch-free."""
    missing = [name for name in PACKAGES if not versions.get(name)]
    if missing:
        return [f"{', '.join(missing)} not installed in this environment ({platform.python_version()}); install "
                f"norga with its dependencies: pip install -e . (README, install)"]
    torch_v, vision_v = versions["torch"], versions["torchvision"]
    series = matching_torchvision(torch_v)
    problems = []
    if series and not _split(vision_v)[0][:2] == (0, int(series.split(".")[1])):
        problems.append(f"torchvision {vision_v} does not pair with torch {torch_v} (needs {series}); "
                        f"{fix_hint(torch_v)}")
    elif _split(torch_v)[1] != _split(vision_v)[1]:
        problems.append(f"torch {torch_v} and torchvision {vision_v} are different builds "
                        f"({_split(torch_v)[1] or 'default'} vs {_split(vision_v)[1] or 'default'}); "
                        f"{fix_hint(torch_v)}")
    return problems


def import_problems() -> List[str]:
    """Import torch, torchvision and timm; what failed, each naming the fix (empty when all import)."""
    problems = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any failure to import is this environment's problem
            first = " ".join(str(err).split())[:200] or type(err).__name__
            torch_v = installed_versions().get("torch")
            fix = fix_hint(torch_v) if name == "torchvision" and torch_v else f"pip install --force-reinstall {name}"
            problems.append(f"import {name} fails ({type(err).__name__}: {first}); {fix}")
            break  # later imports depend on the earlier ones
    return problems


def check_environment() -> None:
    """Raise one EnvironmentProblem when torch, torchvision or timm cannot be imported, with what the installed
    versions say about why (a pairing that merely looks unusual but imports is left to ``norga doctor``)."""
    problems = import_problems()
    if problems:
        raise EnvironmentProblem("; ".join(problems + version_problems(installed_versions())))


def device_lines() -> List[str]:
    """CUDA / MPS availability and the devices (name, memory), one line each (imports torch)."""
    import torch

    lines = [f"CUDA: {'available' if torch.cuda.is_available() else 'not available'} (torch built with CUDA "
             f"{torch.version.cuda or 'none'})"]
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        props = torch.cuda.get_device_properties(i)
        lines.append(f"  cuda:{i}: {props.name}, {props.total_memory / 2**30:.1f} GiB")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        lines.append("MPS (Apple GPU): available")
    lines.append(f"CPU threads used by torch: {torch.get_num_threads()}")
    return lines
