"""The final evaluation: the best configuration and the untuned default (the spec's ``config`` with its ``set``) on the
evaluation sequence, each with every final seed (fresh: none was a tuning seed), as normal run folders
``TUNE/final/{best,default}_sS`` that resume when the command runs again. With one worker they run in this
process, one after the other; with ``-j N`` or a cluster launcher each is a ``norga train`` command started through
the sweep launcher, N at a time (as the trials' workers), its log in ``TUNE/final/logs/``.

``final.md`` (``final_oracle.md`` for an oracle study) gives per arm and metric the mean over seeds with its 95 %
Student-t interval (:func:`norga.reports.summary_stats.describe`), in percent, and each seed's value;
``final.json`` the same numbers. This is the first time the evaluation sequence's test split is read (heldout,
first_task).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import NorgaError
from ..outputs import make_output_folder
from ..reports.summary_stats import clip_interval, describe
from .folder import write_file
from .report import labelled
from .spec import TuneSpec, value_override
from .trial import config_for

METRICS = ("FA", "CA", "FM")
BOUNDS = {"FA": (0.0, 100.0), "CA": (0.0, 100.0), "FM": (-100.0, 100.0)}  # what each metric (%) can take


def run_final(root: Path, spec: TuneSpec, best: Dict[str, Any], label: str, log=print, jobs: int = 1,
              launcher: str = "local", env: Optional[Dict[str, str]] = None,
              launcher_options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Train both arms over the final seeds (resuming finished ones), write final.md / final.json; the summary.

    ``jobs`` 1 with the ``local`` launcher: one run after the other in this process. Otherwise every run is a
    ``norga train`` command (:func:`final_command`: the same config) started through the sweep launcher
    ``launcher``, ``jobs`` at a time (``env``: added to each command's environment; logs ``final/logs/``), and
    its metrics are read back from its run folder, checked against its checkpoints."""
    arms = {"best": best, "default": {}}
    folders = {(arm, seed): Path(root) / "final" / f"{arm}_s{seed}" for arm in arms for seed in spec.final_seeds}
    for folder in folders.values():
        make_output_folder(folder, "--out")
    if jobs == 1 and launcher == "local":
        metrics = _train_here(spec, arms, folders, log)
    else:
        metrics = _train_launched(Path(root), spec, arms, folders, log, jobs, launcher, env or {},
                                  launcher_options or {})
    results: Dict[str, Dict[int, dict]] = {arm: {} for arm in arms}
    for (arm, seed), values in metrics.items():
        results[arm][seed] = {m: values.get(m) for m in METRICS}
    summary = summarize_arms(results, spec, best, label)
    write_file(root, labelled("final.json", label), (json.dumps(summary, indent=1) + "\n").encode())
    write_file(root, labelled("final.md", label), final_markdown(summary).encode())
    log_to_trackers(root, spec, summary)
    return summary


def _train_here(spec: TuneSpec, arms, folders, log) -> Dict[Tuple[str, int], dict]:
    """Every final run in this process, in turn: {(arm, seed): its metrics}."""
    from ..engine import run_training

    metrics = {}
    for (arm, seed), folder in folders.items():
        log(f"final evaluation: {arm} configuration, seed {seed} -> {folder}")
        metrics[arm, seed] = run_training(config_for(spec, None, arms[arm], seed), folder)
    return metrics


def final_command(spec: TuneSpec, values: Dict[str, Any], seed: int, folder: Path) -> List[str]:
    """``python -m norga train`` with the config :func:`~norga.tune.trial.config_for` gives (``protocol`` None:
    the evaluation sequence): the spec's base, its ``set``, the values, the seed."""
    overrides = spec.overrides + [value_override(k, v) for k, v in values.items()] + [f"seed={seed}"]
    command = [sys.executable, "-m", "norga", "train", "--config", spec.base, "--output-dir", str(folder)]
    for item in overrides:
        command += ["--set", item]
    return command


def _train_launched(root: Path, spec: TuneSpec, arms, folders, log, jobs: int, launcher: str, env, options):
    """Every final run as a ``norga train`` command through the sweep launcher: {(arm, seed): its metrics}, read
    back verified; one NorgaError naming the logs of the runs that failed."""
    from ..engine.run_folder import RunDir
    from ..sweep.launchers import launch
    from ..sweep.status import run_state

    names = [f"{arm}_s{seed}" for arm, seed in folders]
    log(f"final evaluation: {len(names)} runs through --launcher {launcher}, {jobs} at a time -> {root / 'final'}")
    outcomes = launch([final_command(spec, arms[arm], seed, folder) for (arm, seed), folder in folders.items()],
                      launcher=launcher, jobs=jobs, log_dir=root / "final" / "logs", names=names, env=env, **options)
    failed = [f"{o.log} (exit {o.returncode})" for o in outcomes if o.returncode != 0]
    if failed:
        raise NorgaError(f"{len(failed)} of {len(names)} final runs failed: see {', '.join(failed)}; run the same "
                         "command again to resume them")
    metrics = {}
    for key, folder in folders.items():
        found = RunDir(folder).read_metrics()  # checked against the checkpoints
        state = run_state(folder)
        if not found or state.kind != "done":
            raise NorgaError(f"final run {folder} did not finish ({state.text()}); run the same command again to "
                             "resume it")
        metrics[key] = found
    return metrics


def log_to_trackers(root: Path, spec: TuneSpec, summary: Dict[str, Any]) -> None:
    """The final table as scalars ``final/<arm>/<metric>_mean`` (and ``_low``, ``_high``; %) to the trackers the
    evaluation config names (``logging.trackers``), their state in the tune folder's ``trackers.json``."""
    from ..toolkit.trackers import open_trackers, tracker_names

    names = tracker_names(config_for(spec, None, {}, spec.final_seeds[0]).logging)
    if not names:
        return
    trackers = open_trackers(Path(root), names, {"tune": {k: v for k, v in summary.items() if k != "arms"}})
    values = {f"final/{arm}/{metric}_{key}": stat[key] for arm, metrics in summary["arms"].items()
              for metric, stat in metrics.items() for key in ("mean", "low", "high") if stat[key] is not None}
    trackers.scalars(values, 0)
    best = summary["arms"].get("best", {})
    trackers.finish({m: best[m]["mean"] / 100 for m in METRICS if m in best}, "complete")


def summarize_arms(results: Dict[str, Dict[int, dict]], spec: TuneSpec, best: Dict[str, Any],
                   label: str) -> Dict[str, Any]:
    """{arm: {metric: {mean, low, high, n, values}}} in percent, with what was tuned and how."""
    arms = {}
    for arm, by_seed in results.items():
        arms[arm] = {}
        for metric in METRICS:
            values = [100 * v[metric] for v in by_seed.values() if v.get(metric) is not None]
            if not values:
                continue
            raw = describe(values)
            e, _ = clip_interval(raw, BOUNDS[metric])  # an interval past what the metric can take says nothing more
            arms[arm][metric] = {"mean": e.mean, "half": _finite((raw.high - raw.low) / 2), "low": _finite(e.low),
                                 "high": _finite(e.high), "n": e.n, "values": dict(zip(map(str, by_seed), values))}
    return {"protocol": spec.protocol_name, "label": label or None, "study": spec.study_name, "objective": spec.metric,
            "final_seeds": spec.final_seeds, "tune_seeds": spec.tune_seeds, "best_values": best, "arms": arms}


def _finite(x: float):
    return None if math.isnan(x) else x


def final_markdown(summary: Dict[str, Any]) -> str:
    """The final table: one row per arm, mean ± half-width [low, high] per metric (%)."""
    label = summary["label"]
    title = f"# Final evaluation of study {summary['study']} ({summary['protocol']}"
    lines: List[str] = [title + (f", {label.upper()}: tuned on the evaluation sequence's test data)" if label
                                 else ")"), "",
                        f"Seeds {summary['final_seeds']} (fresh; tuning seeds {summary['tune_seeds']}); mean over "
                        "seeds ± the half-width of its 95 % Student-t interval [the interval, clipped to what the "
                        "metric can take], in %.", "",
                        f"Tuned values: {', '.join(f'`{k}={v!r}`' for k, v in summary['best_values'].items())}", "",
                        "| configuration | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for arm, name in (("best", "tuned" + (f" ({label})" if label else "")), ("default", "untuned default")):
        cells = [_cell(summary["arms"].get(arm, {}).get(m)) for m in METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(stat) -> str:
    if not stat:
        return "-"
    if stat["low"] is None:
        return f"{stat['mean']:.2f} (n = 1)"
    return f"{stat['mean']:.2f} ± {stat['half']:.2f} [{stat['low']:.2f}, {stat['high']:.2f}]"
