"""The ``norga`` command: ``norga train | eval | export | summarize | reproduce | sweep | routes | doctor | data |
configs | list`` and ``norga --version``.

    norga train --config smoke --output-dir runs/smoke [--set method.wtp.epochs=3 ...] [--dry-run] [--force]
    norga eval --run runs/smoke [--output eval.json]
    norga export --run runs/smoke --out export/ [--push ORG/NAME]   # then: norga eval --from export/
    norga summarize runs/a_s42 runs/a_s43 [--vs runs/b_s42 runs/b_s43] [--out DIR]
    norga routes --run runs/mh_moe          # N_eff / old-task loss change per route of an MoE-adapter run
    norga reproduce --table 1 --rows sup21k --out runs/repro [--dry-run | --report]   # the paper's tables
    norga sweep SPEC.yaml [--launcher local|slurm] [-j N] [--dry-run]   # a grid of runs; norga sweep status ROOT
    norga tune SPEC.yaml [-j N] [--launcher local|slurm]   # Optuna on a protocol that never peeks (tuning.md)
    norga doctor [--config CFG]             # versions, torch/torchvision pairing, devices, a config's paths
    norga data prepare cifar100 --root DATA # download, verify, extract a benchmark (--check validates it)
    norga configs [show NAME | copy NAME DIR]   # the shipped configs (--config takes a file or a shipped NAME)
    norga list

``train.py`` and ``eval.py`` are thin wrappers around :func:`train_main` and :func:`eval_main`. Every command
runs inside one error boundary (:func:`norga.commands.guard.guarded`, docs/failure-behaviour.md): a problem the
user can fix is one line ``error: ...`` on stderr, exit status 2, no traceback (a diverged run: 3, its folder says
``status: failed``; Ctrl-C or SIGTERM: one line saying how to resume, 130), and a failed command leaves nothing
half-created. The config is read and checked before torch and timm are imported.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from .._version import __version__
from ..config import ConfigError, load_config
from ..config.origins import resolved_lines
from .environment import check_environment
from ..config.shipped import shadow_note
from ..errors import NorgaError
from ..outputs import OUTPUT_FOLDER, make_output_folder
from .guard import INTERRUPTED, NewRunFolder, close_progress_bars, guarded, user_error  # noqa: F401 - the contract
from .eval_command import add_eval_arguments, eval_main, run_eval  # noqa: F401 - eval.py, tests
from .export_command import add_export_arguments, run_export
from .preflight import config_problems, doctor_main, run_folder_problem


# ---- train ----------------------------------------------------------------
def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE|NAME",
                        help="a YAML file, or the name of a shipped config (norga configs lists them), e.g. smoke, "
                             "cifar100_norga, smoke/l2p; a name that is also an existing file is read as the file")
    parser.add_argument("--output-dir", type=OUTPUT_FOLDER, default=None,
                        help="run folder (default: runs/<config name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set method.wtp.epochs=3 (repeatable)")
    parser.add_argument("--dry-run", nargs="?", const="full", default=None, choices=("full", "quick"),
                        help="check config, data (decoding every image file; 'quick': a sample of 256), weights "
                             "and checkpoint together, print the task split, train nothing")
    parser.add_argument("--force", action="store_true", help="resume even if the config changed")
    parser.add_argument("--print-config", action="store_true",
                        help="first print the resolved config, each value with its origin (norga configs resolve)")
    parser.add_argument("--feature-cache", type=OUTPUT_FOLDER, default=None, metavar="DIR",
                        help="keep frozen features of un-augmented images in DIR and reuse them across tasks, runs "
                             "and seeds (same numbers; docs/feature-store.md); default: off")


def _precheck(cfg, out: Path) -> None:
    """Checks that need neither torch nor timm (so they fail fast); every problem found is reported together."""
    problems = config_problems(cfg, out)
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{len(problems)} problems: " + "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1)))


def output_dir(args: argparse.Namespace) -> Path:
    """The run folder of ``norga train``: ``--output-dir``, else ``runs/<config name>``."""
    return Path(args.output_dir or Path("runs") / Path(args.config).stem)


def run_train(args: argparse.Namespace) -> int:
    if not str(args.config).strip():
        raise ConfigError("--config is empty; give a YAML file or the name of a shipped config (norga configs "
                          "lists them)")
    cfg = load_config(args.config, args.overrides)  # before torch is imported
    note = shadow_note(args.config)
    if note and os.environ.get("RANK", "0") == "0":  # torchrun: once
        print(note, file=sys.stderr)
    if args.print_config:
        print("\n".join(resolved_lines(args.config, args.overrides)), flush=True)
    out = output_dir(args)
    _precheck(cfg, out)
    if args.feature_cache is not None:  # before the run folder exists: a refused store leaves nothing behind
        from ..toolkit.store_folder import check_store

        check_store(args.feature_cache)
    check_environment()  # torch / torchvision / timm importable and paired: one line naming the fix otherwise
    from ..engine import dry_run, run_training  # torch, timm

    if args.dry_run:
        report = dry_run(cfg, decode=args.dry_run)
        if _main_process():
            print(report)
            print("dry run OK: config, data, weights and checkpoint are usable")
        return 0
    make_output_folder(out, "--output-dir")  # remembered: a failed run leaves no empty folders behind
    m = run_training(cfg, out, force=args.force, feature_cache=args.feature_cache, config_file=args.config)
    if not _main_process():
        return 0
    mixed = "; tasks trained with different configs: see config_history" if m.get("mixed_config") else ""
    print(f"run complete: FA {m['FA']:.4f}  CA {m['CA']:.4f}  FM {m['FM']:.4f} "
          f"({m['completed_tasks']} of {m['num_tasks']} tasks{mixed}) -> {out / 'metrics.json'}")
    return 0


def _main_process() -> bool:
    from ..toolkit.distributed import is_main

    return is_main()


def _resume_hint(args: argparse.Namespace) -> str:
    out = output_dir(args)
    if args.dry_run or not out.is_dir():
        return "nothing was saved"
    from ..engine.run_folder import RunDir

    try:
        done = RunDir(out).scan().done
    except NorgaError:
        return f"the run folder is {out}"
    return (f"{done} completed task(s) are saved in {out}; run the same command again to resume"
            + (f" with task {done}" if done else ""))


def train_main(argv: Optional[Sequence[str]] = None) -> int:
    """``train.py`` / ``norga train``."""
    parser = argparse.ArgumentParser(prog="norga train", description="Train (or resume) a class-incremental run.")
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    return train_guarded(args)


def train_guarded(args: argparse.Namespace) -> int:
    """``norga train`` inside the boundary: a run folder it creates is removed again if training fails before a
    task is completed (a diverged run's folder stays: it says ``status: failed``)."""
    folder = NewRunFolder(output_dir(args))
    return guarded(lambda: run_train(args), lambda: _resume_hint(args), folder.discard)


def checked_run(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` once its ``--run`` folder (eval, export, routes) is known to be a folder with a readable marker."""
    if getattr(args, "run", None) is not None:
        check_environment()  # the run folder's rules live in the engine (torch)
        problem = run_folder_problem(args.run)
        if problem:
            raise NorgaError(problem)
    return args


# ---- routes ----------------------------------------------------------------------
def run_routes(args: argparse.Namespace) -> int:
    check_environment()
    from ..engine.route_report import route_report

    report = route_report(args.run, bins=args.bins)
    for block, layer in sorted(report["layers"].items(), key=lambda kv: int(kv[0])):
        print(f"block {block}: N_eff route-wise {layer['route_wise']['n_eff']:.2f}, path-wise "
              f"{layer['path_wise']['n_eff']:.2f} ({layer['path_wise']['routes']} paths used)")
    print(f"-> {Path(args.run) / 'routes.json'}, {Path(args.run) / 'plots' / 'routes.png'}")
    return 0


# ---- summarize ------------------------------------------------------------
def summarize_main(argv: Sequence[str]) -> int:
    """``norga summarize``: delegated to :mod:`norga.commands.summarize` (imported only now)."""
    import importlib

    try:
        summarize = importlib.import_module("norga.commands.summarize")
    except ModuleNotFoundError as err:
        if err.name not in ("norga.commands.summarize", "norga.reports.summary_stats"):
            raise
        print("error: 'norga summarize' is not available in this installation (module norga.commands.summarize is "
              "missing); update norga", file=sys.stderr)
        return 2
    return guarded(lambda: summarize.main(list(argv)), lambda: "nothing was written")


# ---- the norga command ---------------------------------------------------------------
def data_main(argv: Sequence[str]) -> int:
    """``norga data prepare | list``: :mod:`norga.commands.data_command` (imported only now)."""
    from .data_command import main as run

    return run(list(argv))


def reproduce_main(argv: Sequence[str]) -> int:
    """``norga reproduce``: :mod:`norga.commands.reproduce_command` (imported only now)."""
    from .reproduce_command import main as run

    return guarded(lambda: run(list(argv)), lambda: "finished runs are kept; run the same command again")


def sweep_main(argv: Sequence[str]) -> int:
    """``norga sweep``: :mod:`norga.commands.sweep_command` (imported only now)."""
    from .sweep_command import main as run

    return guarded(lambda: run(list(argv)), lambda: "finished runs are kept; run the same command again to resume")


def configs_main(argv: Sequence[str]) -> int:
    """``norga configs [show NAME | copy NAME DIR]``: :mod:`norga.commands.configs_command` (imported only now)."""
    from .configs_command import main as run

    return guarded(lambda: run(list(argv)), lambda: "nothing was written")


def tune_main(argv: Sequence[str]) -> int:
    """``norga tune``: :mod:`norga.commands.tune_command` (imported only now; Optuna only when a study opens)."""
    from .tune_command import main as run

    return run(list(argv))


def doctor_command(argv: Sequence[str]) -> int:
    """``norga doctor``: :func:`norga.commands.preflight.doctor_main` inside the boundary."""
    return guarded(lambda: doctor_main(list(argv)), lambda: "nothing was written")


def list_main() -> int:
    """``norga list``: :mod:`norga.commands.list_command` (the registries, imported only now)."""
    from .list_command import registry_lines

    print("\n".join(registry_lines()))
    return 0


# subcommands that parse their own arguments: name -> entry point taking the arguments after the name
DELEGATED = {"summarize": summarize_main, "doctor": doctor_command, "data": data_main, "reproduce": reproduce_main,
             "configs": configs_main, "sweep": sweep_main, "tune": tune_main}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``norga`` console command (and ``python -m norga``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:  # commands with their own parser, loaded when used
        return DELEGATED[argv[0]](argv[1:])
    summary = " ".join(__doc__.split("\n\n")[0].replace("``", "").split())  # every command, on one line
    parser = argparse.ArgumentParser(prog="norga", description=summary)
    parser.add_argument("--version", action="version", version=f"norga {__version__}")
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{train,eval,export,summarize,reproduce,sweep,routes,doctor,data,configs,tune,list}")
    add_train_arguments(commands.add_parser("train", help="train or resume a run"))
    add_eval_arguments(commands.add_parser("eval", help="re-evaluate a run from its checkpoints"))
    add_export_arguments(commands.add_parser("export", help="write a run's trained state as safetensors, its "
                                                         "config, metrics and a model card (--push: to the Hub)"))
    commands.add_parser("summarize", help="aggregate run folders over seeds (norga summarize --help)")
    commands.add_parser("reproduce", help="the paper's tables from the shipped manifest (norga reproduce --help)")
    commands.add_parser("sweep", help="a grid of runs from a sweep file, locally or on SLURM (norga sweep --help)")
    routes = commands.add_parser("routes", help="N_eff and old-task loss change per route of an MoE-adapter run")
    routes.add_argument("--run", "--run-dir", dest="run", required=True, type=Path, help="a finished run folder")
    routes.add_argument("--bins", type=int, default=4, help="mass-quantile bins of N_eff (default 4)")
    commands.add_parser("doctor", help="check this install: versions, torch/torchvision pairing, devices (--config)")
    commands.add_parser("data", help="prepare or check a benchmark folder (norga data prepare --help)")
    commands.add_parser("configs", help="the shipped configs: list, show NAME, copy NAME DIR (norga configs --help)")
    commands.add_parser("tune", help="tune hyperparameters with Optuna on a protocol (norga tune --help)")
    commands.add_parser("list", help="registered gates, methods, benchmarks and backbone presets")
    args = parser.parse_args(argv)
    if args.command == "train":
        return train_guarded(args)
    if args.command == "eval":
        return guarded(lambda: run_eval(checked_run(args)), lambda: "nothing was written")
    if args.command == "export":
        return guarded(lambda: run_export(checked_run(args)),
                       lambda: "the unfinished export was removed; nothing was written")
    if args.command == "routes":
        return guarded(lambda: run_routes(checked_run(args)), lambda: "nothing was written")
    return guarded(list_main, lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
