"""``norga sweep``: a grid of runs from a sweep file, on this machine or a SLURM cluster (docs/sweeps.md).

    norga sweep configs/sweeps/smoke_grid.yaml --dry-run                 # the runs, their status and estimates
    norga sweep configs/sweeps/smoke_grid.yaml -j 2 [--gpus 0,1]         # 2 runs at a time on this machine
    norga sweep SPEC --launcher slurm --partition gpu --gpus-per-job 1 --time 240 [--nodes 2 --nproc 4]
    norga sweep SPEC --retry-failed                                      # resubmit the runs that failed too
    norga sweep status ROOT                                              # done / partial / failed / missing

Each point of the grid (and seed) is one run folder ``ROOT/<point>/seed<S>`` trained by ``norga train``; running
the same command again launches only what is not done (partial runs resume after their last finished task).
Exit status 0 when every run is done (or, with --no-wait, submitted); 2 otherwise or for unusable input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..outputs import OUTPUT_FOLDER
from ..sweep.launchers import LaunchError, check_launcher
from ..sweep.points import check_points, expand
from ..sweep.root import check_root, root_rows, write_root
from ..sweep.run import plan, run_points
from ..sweep.spec import SweepError, load_spec
from ..sweep.status import table


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="norga sweep", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n")[1])
    p.add_argument("spec", type=Path, metavar="SPEC.yaml", help="the sweep file (docs/sweeps.md); "
                   "'norga sweep status ROOT' prints a sweep's status")
    p.add_argument("--out", type=OUTPUT_FOLDER, default=None, help="the sweep root (default: the file's out:)")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for every run, not part of the points' names (e.g. device=cuda; repeatable)")
    p.add_argument("--nproc", type=int, default=1, help="processes per run (torchrun --nproc-per-node)")
    p.add_argument("--feature-cache", type=OUTPUT_FOLDER, default=None, metavar="DIR",
                   help="one frozen-feature store for every run (docs/feature-store.md)")
    p.add_argument("--dry-run", action="store_true", help="list the runs, their status and estimates; run nothing")
    p.add_argument("--no-estimate", action="store_true", help="--dry-run without the timing measurement")
    p.add_argument("--retry-failed", action="store_true", help="also resubmit runs whose last command failed")
    add_launcher_arguments(p)
    return p


def add_launcher_arguments(p: argparse.ArgumentParser, default: Optional[str] = "local") -> None:
    """The launcher's options (``norga sweep``, ``norga reproduce --launcher``): --launcher, -j, --gpus, --nodes and
    the SLURM group."""
    p.add_argument("--launcher", default=default, help="local, slurm, or submitit-local (submitit's LocalExecutor: "
                   "the SLURM submission path on this machine); default: " + (default or "none, the runs one after "
                                                                             "another in this process"))
    p.add_argument("-j", "--jobs", type=int, default=None, help="runs at a time (default 1; SLURM: every job of the "
                   "array may run at once unless -j or --array-parallelism)")
    p.add_argument("--gpus", default=None, metavar="0,1", help="local: one of these CUDA_VISIBLE_DEVICES per run")
    p.add_argument("--nodes", type=int, default=1, help="slurm: nodes per run (torchrun --nnodes, c10d rendezvous)")
    slurm = p.add_argument_group("slurm (--launcher slurm; pip install norga[cluster])")
    slurm.add_argument("--partition", default=None)
    slurm.add_argument("--gpus-per-job", type=int, default=0, help="GPUs per run (per node)")
    slurm.add_argument("--time", type=int, default=60, metavar="MINUTES", help="time limit of a job (default 60)")
    slurm.add_argument("--array-parallelism", type=int, default=None, help="jobs of the array running at once")
    slurm.add_argument("--slurm", dest="slurm_extra", action="append", default=[], metavar="KEY=VALUE",
                       help="any other sbatch option, passed through (e.g. --slurm account=proj --slurm qos=high)")
    slurm.add_argument("--no-wait", action="store_true", help="submit and return (then: norga sweep status ROOT)")


def launch_options(args) -> dict:
    """The launcher's options from the command line (SLURM options only for the submitit launchers)."""
    options = {"gpus": [g for g in (args.gpus or "").split(",") if g.strip()]}
    if args.launcher == "slurm":
        extra = {}
        for item in args.slurm_extra:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise LaunchError(f"--slurm: expected KEY=VALUE (an sbatch option without --), got {item!r}")
            extra[key.strip().lstrip("-")] = value
        options.update(partition=args.partition, gpus_per_job=args.gpus_per_job, time_min=args.time,
                       array_parallelism=args.array_parallelism, extra=extra,
                       wait=not args.no_wait)
    elif args.nodes > 1 or args.slurm_extra or args.partition or args.no_wait:
        raise LaunchError("--nodes, --partition, --slurm and --no-wait go with --launcher slurm")
    elif args.launcher == "submitit-local":
        options["time_min"] = args.time if args.time != 60 else 24 * 60
    return options


def dry_run(points, configs, states, measure: bool, nproc: int, feature_cache) -> None:
    """Print every run: its status, estimated time and memory (reproduce's estimate), its command."""
    from ..reproduce import estimate as est

    rates, total = {}, 0.0
    for point, cfg, state in zip(points, configs, states):
        key = est.rate_key(cfg)
        if measure and key not in rates:
            rates[key] = est.measure_rates(cfg)
        e = est.estimate(est.workload(cfg), rates.get(key), est.train_batch(cfg))
        total += (e["seconds"] or 0.0) * (state.kind != "done")
        print(f"{point.label}: {state.text()}; est. {est.human_seconds(e['seconds'])}, peak memory "
              f"{e['peak_mib'] or '?'}")
        print(f"    $ {point.shell(nproc, feature_cache)}")
    print(table([(p.name, p.seed, s) for p, s in zip(points, states)])[-1] + "; estimated time of the runs not done: "
          + (est.human_seconds(total) if rates else "? (--no-estimate)"))


def run_sweep(args) -> int:
    """The command after parsing; raises NorgaError/ConfigError for unusable input."""
    spec = load_spec(args.spec)
    root = args.out or spec.out
    if root is None:
        raise SweepError(f"{args.spec} names no out: folder; give --out ROOT")
    if (args.jobs is not None and args.jobs < 1) or args.nproc < 1 or args.nodes < 1:
        raise SweepError("-j, --nproc and --nodes take a number >= 1")
    points = expand(spec, Path(root), args.extra)
    configs = check_points(points)  # torch-free: every config mistake before anything runs
    totals = {p.label: cfg.data.num_tasks for p, cfg in zip(points, configs)}
    options = launch_options(args)
    if args.dry_run:
        if not args.no_estimate:
            from .environment import check_environment

            check_environment()
        dry_run(points, configs, plan(points, Path(root), totals), not args.no_estimate, args.nproc,
                args.feature_cache)
        return 0
    check_root(Path(root))
    if args.feature_cache is not None:
        from ..toolkit.store_folder import check_store

        check_store(args.feature_cache)
    check_launcher(args.launcher)  # submitit installed for slurm: before anything is written
    write_root(Path(root), points, [totals[p.label] for p in points], args.spec)
    jobs = args.jobs or (256 if args.launcher == "slurm" else 1)  # SLURM: submitit's default array parallelism
    outcomes = run_points(points, Path(root), totals, args.launcher, jobs, args.nproc, args.nodes,
                          args.feature_cache, args.retry_failed, **options)
    if outcomes and outcomes[0].returncode is None:  # submitted, not waited for
        print(f"submitted {len(outcomes)} job(s) ({', '.join(o.job_id or '?' for o in outcomes[:3])}"
              f"{', ...' if len(outcomes) > 3 else ''}); norga sweep status {root}")
        return 0
    labels = {(p.name, p.seed) for p in points}
    rows = [row for row in root_rows(Path(root)) if (row[0], row[1]) in labels]
    print("\n".join(table(rows)))
    return 0 if all(state.kind == "done" for _, _, state in rows) else 2


def status_main(argv: Sequence[str]) -> int:
    """``norga sweep status ROOT|SPEC``: the table of a sweep root (or of the root a sweep file names)."""
    p = argparse.ArgumentParser(prog="norga sweep status", description="done / partial / failed / missing of "
                                "every run of a sweep, read from its run folders")
    p.add_argument("root", type=Path, metavar="ROOT|SPEC.yaml", help="a sweep root, or the sweep file")
    p.add_argument("--out", type=Path, default=None, help="with a sweep file: its root, if not the file's out:")
    args = p.parse_args(list(argv))
    root = args.root
    if root.is_file():
        spec = load_spec(root)
        root = args.out or spec.out
        if root is None:
            raise SweepError(f"{args.root} names no out: folder; give --out ROOT")
    rows = root_rows(Path(root))
    print("\n".join(table(rows)))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``norga sweep`` (``norga.commands.cli`` wraps it in the error boundary)."""
    argv = list(argv or [])
    if argv[:1] == ["status"]:
        return status_main(argv[1:])
    return run_sweep(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
