"""``norga reproduce``: the paper's tables from the manifest, in one command (docs/reproduce.md).

    norga reproduce --table 1 --rows sup21k --out runs/repro --dry-run   # runs, commands, estimated time/memory
    norga reproduce --table 1 --rows sup21k --out runs/repro --set amp=bf16   # run what is missing, then report
    norga reproduce --table 1 --out runs/repro --report                  # the report alone, from the run folders
    norga reproduce --table 1 --shard 0/4 --out runs/repro               # this machine's quarter of the grid
    norga reproduce --table 1 --print-commands [--nproc 8]               # one norga train / torchrun line per run
    norga reproduce --quick-gpu [--dry-run]                              # the 30-minute GPU check

Writes ``OUT/reproduce.md`` and ``OUT/reproduce.json`` after running (or with ``--report``). Exit status 0; 2 for
unusable input or runs that stopped on an error; 3 when a run diverged.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import DIVERGED_EXIT
from ..outputs import OUTPUT_FILE, OUTPUT_FOLDER
from ..reproduce import estimate as est
from ..reproduce.inputs import missing_inputs
from ..reproduce.manifest import (DEFAULT_NAME, QUICK_NAME, ManifestError, load_manifest, manifest_file, parse_shard,
                                  select)
from ..reproduce.report import aggregate, fill_readme, markdown, write_report
from ..reproduce.runner import check_configs, expand, launch_all, parse_pairs, record_sweep, run_all
from ..sweep.launchers import check_launcher
from .sweep_command import add_launcher_arguments, launch_options

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="norga reproduce", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n")[1])
    p.add_argument("--manifest", default=None, metavar="FILE|NAME",
                   help=f"a manifest file, or the name of a shipped one (default: the shipped {DEFAULT_NAME}; "
                   f"{QUICK_NAME} with --quick-gpu); a name that is also an existing file is read as the file")
    p.add_argument("--table", type=int, default=None, help="the manifest's table (the paper's: 1 or 2; default: all)")
    p.add_argument("--protocol", dest="protocols", nargs="+", default=[], metavar="NAME",
                   help="only the cells of these protocols (the manifest's protocols:; default: all)")
    p.add_argument("--rows", nargs="+", default=[], metavar="ROW", help="backbone rows, e.g. sup21k ibot21k")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME",
                   help="methods (norga hideprompt ...), benchmarks (cifar100 ...) or cell-id patterns (t1-cifar100-*)")
    p.add_argument("--shard", default=None, metavar="I/N", help="run shard I of N (0-based) of the selected cells")
    p.add_argument("--seeds", type=int, default=None, metavar="K", help="only the first K seeds of every cell")
    p.add_argument("--out", type=OUTPUT_FOLDER, default=None, help="folder of the run folders and the report "
                   "(default runs/reproduce, runs/quick_gpu with --quick-gpu)")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="override for every run, e.g. --set device=cuda --set amp=bf16 (repeatable)")
    p.add_argument("--weights", action="append", default=[], metavar="ROW=PATH",
                   help="local checkpoint of a backbone row, e.g. ibot21k=weights/ibot_vitb16.pth (repeatable)")
    p.add_argument("--data", action="append", default=[], metavar="BENCHMARK=ROOT",
                   help="data.root of a benchmark's runs, e.g. cifar100=/data/cifar100 (repeatable; default: the "
                        "configs' roots, relative to the current folder)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list the runs with status and estimated time/memory")
    mode.add_argument("--report", action="store_true", help="only (re)write the report from the run folders")
    mode.add_argument("--print-commands", action="store_true", help="print one norga train command per run")
    p.add_argument("--feature-cache", type=OUTPUT_FOLDER, default=None, metavar="DIR",
                   help="a frozen-feature store shared by every run (norga train --feature-cache; "
                        "docs/feature-store.md): "
                        "the seeds and cells of one backbone and data set compute each frozen feature once")
    p.add_argument("--nproc", type=int, default=1, help="with --print-commands or --launcher: torchrun processes "
                   "per run")
    add_launcher_arguments(p, default=None)  # --launcher: the grid as a sweep (docs/sweeps.md); default in-process
    p.add_argument("--no-estimate", action="store_true", help="--dry-run without the timing measurement")
    p.add_argument("--readme", type=OUTPUT_FILE, default=None, metavar="README.md",
                   help="with --report: fill the file's <!-- reproduce:gpu --> table with the complete cells")
    p.add_argument("--quick-gpu", action="store_true", help=f"the 30-minute GPU check (the shipped {QUICK_NAME})")
    return p


def print_plan(cells, runs, configs, manifest, measure: bool) -> None:
    """Print every selected cell (not runnable ones with the reason, runnable ones lacking their data or weights
    on this machine with what is missing): its command, its runs' status, estimate."""
    rates, total, by_cell, lacking = {}, 0.0, {}, 0
    for run, cfg in zip(runs, configs):
        by_cell.setdefault(run.cell.id, []).append((run, cfg))
    shown_protocol = None
    for cell in cells:
        if len(manifest.protocols) > 1 and cell.protocol != shown_protocol:
            shown_protocol = cell.protocol
            print(f"== protocol {cell.protocol}: {cell.protocol_label}")
        print(f"{cell.id}  [{cell.source}]" + (f"  note: {cell.note}" if cell.note else ""))
        if not cell.runnable:
            print(f"    not runnable: {cell.missing}")
            continue
        cell_runs = by_cell.get(cell.id, [])
        if not cell_runs:
            continue
        run, cfg = cell_runs[0]
        missing = missing_inputs(cfg, cell.benchmark, cell.backbone)
        lacking += bool(missing)
        key = est.rate_key(cfg)
        if measure and key not in rates:
            rates[key] = est.measure_rates(cfg)
        e = est.estimate(est.workload(cfg, manifest.benchmarks.get(cell.benchmark)), rates.get(key),
                         est.train_batch(cfg))
        total += (e["seconds"] or 0.0) * len(cell_runs)
        states = ", ".join(f"{r.seed} {r.status()}" for r, _ in cell_runs)
        print(f"    seeds: {states}; est. {est.human_seconds(e['seconds'])} and peak memory "
              f"{e['peak_mib'] or '?'} per run")
        if missing:
            print(f"    not runnable here, missing: {'; '.join(missing)}")
        print(f"    $ {run.command()}")
    runnable = sum(c.runnable for c in cells)
    print(f"{len(cells)} cells ({runnable - lacking} runnable here, {lacking} lacking data or weights here, "
          f"{len(cells) - runnable} not runnable), {len(runs)} runs; estimated total "
          + (f"{est.human_seconds(total)} on {', '.join(sorted({r.device + ' amp ' + r.amp for r in rates.values()}))}"
             if rates else "? (--no-estimate)"))
    if rates:
        print("estimates, not measurements: each config's backbone passes x the images/s of a short timed "
              "forward/backward on this device; memory: the training step's peak, on CUDA extrapolated linearly "
              "from batches 32 and 8 to the run's training batch (torchrun: per process, batch / processes)")


def execute(args, cells, runs, out: Path, title: str) -> int:
    """Run the missing runs, then write the report (rank 0); the exit status. With --quick-gpu each run's
    per-stage timings and peak memory, and the measured images/s of the three backbone passes, go in too."""
    main_process = os.environ.get("RANK", "0") == "0"

    def log(line: str) -> None:
        if main_process:
            print(line, flush=True)

    if main_process:
        record_sweep(runs, out)  # norga sweep status OUT reads the grid
    if args.launcher is not None:
        jobs = args.jobs or (256 if args.launcher == "slurm" else 1)
        failures = launch_all(runs, out, args.launcher, jobs, args.nproc, args.nodes, args.feature_cache, log,
                              **launch_options(args))
        quick = None
    elif not args.quick_gpu:
        failures = run_all(runs, log, args.feature_cache)
        quick = None
    else:
        from ..reproduce.quick import peak_memory_mib, stage_timings

        failures, quick = [], {"runs": {}}
        peak_memory_mib(reset=True)
        for run_ in runs:
            failures += run_all([run_], log, args.feature_cache)
            quick["runs"][f"{run_.cell.id}/seed{run_.seed}"] = {
                "stages": stage_timings(run_.folder, run_.config()), "peak_mib": peak_memory_mib(reset=True)}
        rates = est.measure_rates(runs[0].config()) if runs else None
        quick["passes_img_s"] = rates.__dict__ if rates else None
    if main_process:
        report(cells, out, title, quick, args.seeds)
    if any(diverged for _, _, diverged in failures):
        return DIVERGED_EXIT
    return 2 if failures else 0


def report(cells, out: Path, title: str, quick_records: Optional[dict] = None, seeds: Optional[int] = None,
           readme: Optional[Path] = None) -> None:
    """Write and print the report of ``cells`` from the run folders under ``out`` (and fill ``readme``'s table)."""
    rows = aggregate(cells, out, seeds)
    if readme is not None:
        try:
            print(f"{fill_readme(readme, rows)} line(s) written into {readme}'s reproduced-on-GPU table")
        except (OSError, ValueError) as err:
            raise ManifestError(f"--readme: {err}") from None
    from ..reproduce.quick import timing_lines

    appendix = timing_lines(quick_records) if quick_records else ""
    paths = write_report(rows, out, title, {"quick_gpu": quick_records} if quick_records else None, appendix)
    if quick_records:
        print(appendix.strip())
    print("\n".join(line for line in markdown(rows, title, out).splitlines() if line.startswith("|")))
    print(f"-> {paths[0]}, {paths[1]}")


def run_reproduce(args) -> int:
    """The command after parsing (see the module docstring); raises NorgaError/ConfigError for unusable input."""
    if args.readme is not None and not args.report:
        raise ManifestError("--readme goes with --report (the README's table is filled from finished runs)")
    if args.seeds is not None and args.seeds < 1:
        raise ManifestError(f"--seeds: expected a number of seeds >= 1, got {args.seeds}")
    manifest = load_manifest(manifest_file(args.manifest, args.quick_gpu))
    cells = select(manifest, args.table, args.rows, args.only, parse_shard(args.shard), args.protocols)
    if not cells:
        raise ManifestError("the selection (--table/--rows/--only/--shard) leaves no cell")
    out = args.out or Path("runs") / ("quick_gpu" if args.quick_gpu else "reproduce")
    title = ("Quick GPU check" if args.quick_gpu else f"Reproduction of {manifest.paper}") + \
        (f", Table {args.table}" if args.table else "")
    runs = expand(cells, out, args.extra, parse_pairs(args.weights, "--weights", list(manifest.backbones),
                                                      "ibot21k=weights/ibot_vitb16.pth"), args.seeds,
                  parse_pairs(args.data, "--data", list(manifest.benchmarks), "cifar100=/data/cifar100"))
    if args.report:
        report(cells, out, title, seeds=args.seeds, readme=args.readme)
        return 0
    configs = check_configs(runs)  # torch-free: every config mistake before anything runs
    if args.launcher is not None:
        if args.quick_gpu or (args.jobs is not None and args.jobs < 1):
            raise ManifestError("--launcher runs the grid as a sweep: not with --quick-gpu; -j takes a number >= 1")
        launch_options(args)  # SLURM options only with --launcher slurm: one line before anything runs
        check_launcher(args.launcher)
    if args.feature_cache is not None:
        from ..toolkit.store_folder import check_store

        check_store(args.feature_cache)
    if args.quick_gpu and not args.print_commands:
        from ..reproduce.quick import expected_line

        print(expected_line(runs, configs, manifest))
    if args.print_commands:
        for run_ in runs:
            print(f"{run_.command(args.nproc, args.feature_cache)}   # {run_.status()}")
        return 0
    if args.dry_run:
        if not args.no_estimate and runs:
            from .environment import check_environment

            check_environment()
        print_plan(cells, runs, configs, manifest, measure=not args.no_estimate)
        return 0
    from .environment import check_environment

    check_environment()
    return execute(args, cells, runs, out, title)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``norga reproduce`` (``norga.commands.cli`` wraps it: one ``error:`` line and exit 2 for unusable
    input, Ctrl-C with a resume hint)."""
    return run_reproduce(parser().parse_args(list(argv or [])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
