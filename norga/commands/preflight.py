"""Checks before anything heavy loads: a config's paths (torch-free) and ``norga doctor``.

:func:`config_problems` is what every ``norga train`` checks before importing torch: model and weights paths,
the data root, the output folder; each problem one line naming the fix, all of them reported together.
``norga doctor [--config CFG]`` prints the versions of Python, norga, torch, torchvision and timm, whether
torch and torchvision pair, the devices, and (with a config) the device it resolves to and its paths; it exits
0 when everything is usable, else 2 with every problem on its own ``error:`` line.
"""
from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from .._version import __version__
from ..config import ConfigError, load_config
from ..config.schema import is_hub_reference
from .guard import short_path
from .environment import device_lines, import_problems, installed_versions, version_problems


def config_problems(cfg, out: Optional[Path] = None) -> List[str]:
    """Every problem of ``cfg``'s model, weights and data paths (and of the output folder ``out``), torch-free."""
    problems = []
    if cfg.model.preset is None and cfg.model.name is None:
        problems.append("model: set model.preset (e.g. sup21k; 'norga list' shows them) or model.name (a timm "
                        "model name)")
    local = cfg.model.checkpoint and not is_hub_reference(cfg.model.checkpoint)  # Hub files: checked at build
    if local and not Path(cfg.model.checkpoint).is_file():
        kind = "is a folder, give the weights file itself" if Path(cfg.model.checkpoint).is_dir() else "not found"
        problems.append(f"model.checkpoint: {cfg.model.checkpoint} {kind} (relative paths start at {Path.cwd()})")
    if cfg.data.root and not cfg.data.download and not Path(cfg.data.root).exists():
        problems.append(f"data.root: {cfg.data.root} does not exist (relative paths start at {Path.cwd()}); fix "
                        "the path, or set data.download=true where the benchmark can be downloaded")
    if out is not None:
        problems += _output_problems(out)
    if cfg.logging.tensorboard and "tensorboard" not in (cfg.logging.trackers or []) and \
            importlib.util.find_spec("tensorboard") is None:
        problems.append("logging.tensorboard is true but the 'tensorboard' package is not installed: pip install "
                        "tensorboard (or pip install \"norga[tensorboard]\"), or set logging.tensorboard=false")
    return problems


def _output_problems(out: Path, option: str = "--output-dir") -> List[str]:
    """The problems of the output folder ``out``: a file, or a path this file system cannot hold."""
    try:
        os.lstat(out)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            longest = max(len(os.fsencode(part)) for part in out.parts)
            return [f"{option} {short_path(out)}: a name in it is too long for this file system (the longest has "
                    f"{longest} bytes); choose a shorter {option}"]
        return []
    return [] if out.is_dir() else [f"output folder {out} exists and is not a folder; choose another {option}"]


def run_folder_problem(run: Path, option: str = "--run") -> Optional[str]:
    """What makes ``run`` unusable as the run folder ``norga eval`` / ``export`` / ``routes`` reads, for the cases
    whose engine message would mislead: a file, or a ``norga-run.json`` that is not norga's marker. Imports
    the engine (torch)."""
    from ..engine.run_marker import MARKER, read_marker
    from ..errors import NorgaError

    if run.is_file():
        return f"{option} {run} is a file, not a run folder; give the folder norga train wrote (its --output-dir)"
    if (run / MARKER).is_file():
        try:
            read_marker(run)
        except NorgaError:
            return (f"{run / MARKER} is not norga's run marker (a file of that name written by another program, "
                    f"or damaged), so {run} cannot be read as a run: restore the {MARKER} norga wrote, or give "
                    f"the folder norga train wrote ({option})")
    return None


def doctor_lines(config: Optional[str], overrides: Sequence[str]) -> tuple:
    """(report lines, problems) of this environment and, with a config, of that config. A torch/torchvision
    pairing that breaks the usual rules but imports is a ``warning:`` line of the report, not a problem."""
    versions = installed_versions()
    lines = [f"python {platform.python_version()} ({sys.executable})", f"norga {__version__}"]
    lines += [f"{name} {version or 'NOT INSTALLED'}" for name, version in versions.items()]
    problems = import_problems()
    if problems:
        problems += version_problems(versions)
    else:
        lines += [f"warning: {p}" for p in version_problems(versions)] + device_lines()
    if config is not None:
        try:
            cfg = load_config(config, list(overrides))
        except ConfigError as err:
            return lines, problems + [f"{config}: {err}" if str(config).strip() else str(err)]
        lines.append(f"config {config}: device {cfg.device}, data {cfg.data.name} at {cfg.data.root or '-'}, "
                     f"weights {cfg.model.checkpoint or ('timm hub' if cfg.model.pretrained else 'random init')}")
        problems += config_problems(cfg)
        if not import_problems():
            problems += _device_problems(cfg.device)
    return lines, problems


def _device_problems(device: str) -> List[str]:
    from ..toolkit.devices import resolve_device

    try:
        resolve_device(device)
    except ConfigError as err:
        return [str(err)]
    return []


def doctor_main(argv: Optional[Sequence[str]] = None) -> int:
    """``norga doctor``: print the report; exit 0 if usable, else 2 with one ``error:`` line per problem."""
    parser = argparse.ArgumentParser(prog="norga doctor", description="Check this install (and a config).")
    parser.add_argument("--config", default=None, help="also check this config's device, data and weights paths")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    lines, problems = doctor_lines(args.config, args.overrides)
    print("\n".join(lines))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print("ok: norga can run here" + (f" with {args.config}" if args.config else ""))
    return 2 if problems else 0
