"""What a tune folder shows of its study: the trial table, the best configuration, the plots.

* ``trials.csv``: one row per trial (number, state, value, each searched key, seconds, worker, run folders,
  protocol); ``best.yaml``: the evaluation config with the best trial's values, fully resolved, a file
  ``norga train --config`` takes; ``plots/history.png`` and ``plots/importances.png`` through Optuna's matplotlib
  visualisation (a plot that cannot be drawn, e.g. importances before two finished trials, is skipped with a note).
* An oracle study says so in every file: the names end in ``_oracle``, the table has ``protocol = oracle`` on every
  row, the YAML's first line and the plots' titles say "oracle".
"""
from __future__ import annotations

import csv
import io
from typing import Any, Dict, List, Optional

import yaml

from ..config import config_to_dict
from .folder import write_file
from .spec import TuneSpec
from .trial import WORKER_ATTR, config_for


def labelled(name: str, label: str) -> str:
    """``best.yaml`` -> ``best_oracle.yaml`` for a labelled study."""
    if not label:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}_{label}.{ext}" if dot else f"{name}_{label}"


def trial_rows(study, spec: TuneSpec, protocol: str) -> List[Dict[str, Any]]:
    """The trial table: one dict per trial, in trial order."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        seconds = (trial.datetime_complete - trial.datetime_start).total_seconds() if (
            trial.datetime_complete and trial.datetime_start) else None
        runs = [v for k, v in sorted(trial.user_attrs.items()) if k.startswith("run_s")]
        rows.append({"number": trial.number, "state": trial.state.name,
                     spec.metric: "" if trial.value is None else f"{trial.value:.6g}",
                     **{p.key: trial.params.get(p.key, "") for p in spec.space},
                     "last_step": "" if not trial.intermediate_values else max(trial.intermediate_values),
                     "seconds": "" if seconds is None else f"{seconds:.1f}",
                     "worker": trial.user_attrs.get(WORKER_ATTR, ""), "runs": " ".join(runs), "protocol": protocol})
    return rows


def table_csv(rows: List[Dict[str, Any]]) -> bytes:
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue().encode()


def best_trial(study):
    """The best finished trial, or None when no trial completed."""
    import optuna

    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return study.best_trial if completed else None


def best_yaml(spec: TuneSpec, values: Dict[str, Any], value: float, number: int, label: str) -> bytes:
    """The evaluation config with ``values``, resolved, as YAML ``norga train --config`` reads."""
    cfg = config_for(spec, None, values, load_seed(spec))
    note = (f"# best of norga tune {spec.path.name} (study {spec.study_name}, protocol {spec.protocol_name}"
            f"{', ' + label.upper() + ': tuned on the evaluation test data' if label else ''}): trial {number}, "
            f"{spec.metric} {value:.4f}; searched: {', '.join(f'{k}={v!r}' for k, v in values.items())}\n")
    return (note + yaml.safe_dump(config_to_dict(cfg), sort_keys=False)).encode()


def load_seed(spec: TuneSpec) -> int:
    from ..config import load_config

    return load_config(spec.base, spec.overrides).seed


def write_reports(root, study, spec: TuneSpec, label: str) -> Optional[Dict[str, Any]]:
    """trials.csv, best.yaml and the plots into the tune folder; the best trial's values (None: no trial done)."""
    protocol = spec.protocol_name + (f" ({label})" if label and label != spec.protocol_name else "")
    write_file(root, labelled("trials.csv", label), table_csv(trial_rows(study, spec, protocol)))
    best = best_trial(study)
    notes = write_plots(root, study, label)
    if best is None:
        return {"best": None, "notes": notes}
    values = {p.key: best.params[p.key] for p in spec.space}
    write_file(root, labelled("best.yaml", label), best_yaml(spec, values, best.value, best.number, label))
    return {"best": values, "value": best.value, "number": best.number, "notes": notes}


def write_plots(root, study, label: str) -> List[str]:
    """plots/history.png and plots/importances.png; the notes of plots skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    notes = []
    for name, draw in (("history", ovm.plot_optimization_history), ("importances", ovm.plot_param_importances)):
        try:
            axes = draw(study)
        except Exception as err:  # noqa: BLE001 - too few trials, one parameter: the plot is skipped, not the study
            notes.append(f"plots/{labelled(name + '.png', label)} not drawn: {type(err).__name__}: {err}")
            continue
        figure = axes.figure if hasattr(axes, "figure") else axes[0].figure
        if label:
            figure.suptitle(f"{label.upper()}: tuned on the evaluation sequence's test data")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        plt.close(figure)
        write_file(root, f"plots/{labelled(name + '.png', label)}", buffer.getvalue())
    return notes
