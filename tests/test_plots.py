"""Per-run plots: valid PNGs from hand-written metrics and epochs.jsonl, skipped loss plot, failures only warn."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from conftest import REPO_ROOT as REPO
from norga.reports import plots
from norga.reports.plots import PLOT_DIR, RUN_PLOTS, percent_matrix, running_average, write_run_plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

METRICS = {  # 3 tasks, fractions; None where t < i
    "completed_tasks": 3, "num_tasks": 3,
    "acc_matrix": [[0.9, 0.8, 0.7], [None, 0.6, 0.5], [None, None, 0.4]],
    "til_acc_matrix": [[0.95, 0.9, 0.9], [None, 0.8, 0.8], [None, None, 0.7]],
    "tii_acc_matrix": [[1.0, 0.9, 0.8], [None, 0.7, 0.6], [None, None, 0.5]],
    "tii_confusion": [[8, 1, 1], [2, 6, 2], [1, 4, 5]],
}


def assert_png(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    return image


def write_jsonl(run: Path, records) -> None:
    (run / "epochs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def hand_records():
    out = []
    for task in range(3):
        for stage, epochs in (("tii", 2), ("wtp", 3)):
            for e in range(epochs):
                r = {"stage": stage, "task": task, "epoch": e, "elapsed": 1.0, "time": 0.0, "lr": 0.01, "steps": 4,
                     "loss": 2.0 / (e + 1 + task), "alpha": [1.0, 1.1]}
                if stage == "wtp":
                    r.update(ce=1.5 / (e + 1), reg=0.1)
                out.append(r)
    return out


def test_every_plot_is_a_valid_png_and_readable(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS))
    write_jsonl(tmp_path, hand_records())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = write_run_plots(tmp_path)
    assert sorted(p.name for p in written) == sorted(RUN_PLOTS)
    for path in written:
        assert_png(path)
    assert sorted(p.name for p in (tmp_path / PLOT_DIR).iterdir()) == sorted(RUN_PLOTS)  # no temp files left


def test_loss_plot_skipped_cleanly_without_epoch_lines(tmp_path):
    (tmp_path / "epochs.jsonl").write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # skipping is not a failure: no warning
        written = write_run_plots(tmp_path, METRICS)
        (tmp_path / "epochs.jsonl").unlink()
        written_without_file = write_run_plots(tmp_path, {k: v for k, v in METRICS.items() if k != "tii_confusion"})
    assert "loss.png" not in {p.name for p in written} and len(written) == len(RUN_PLOTS) - 1
    assert {p.name for p in written_without_file} == {"acc_matrix.png", "average_acc.png", "task_acc.png"}


def test_a_failing_plot_only_warns(tmp_path, monkeypatch):
    def broken(metrics, records):
        raise RuntimeError("boom")

    monkeypatch.setitem(RUN_PLOTS, "task_acc.png", broken)
    with pytest.warns(RuntimeWarning, match="task_acc.png failed.*boom"):
        written = write_run_plots(tmp_path, METRICS)
    assert "task_acc.png" not in {p.name for p in written} and len(written) == 3
    with pytest.warns(RuntimeWarning, match="skipped"):
        assert write_run_plots(tmp_path / "no_such_run") == []  # no metrics.json: warns, never raises


def test_matrix_helpers_by_hand():
    S = percent_matrix(METRICS["acc_matrix"], 3)
    assert np.isnan(S[1, 0]) and S[0, 2] == pytest.approx(70.0)
    assert running_average(S) == pytest.approx([90.0, 70.0, (70 + 50 + 40) / 3])
    assert percent_matrix(METRICS["acc_matrix"], 2).shape == (2, 2)  # leading block of completed tasks


SMOKE_LIKE = {  # the smoke run's matrices (94-100 %): on a 0-100 scale every cell is the same colour
    "completed_tasks": 3, "num_tasks": 3,
    "acc_matrix": [[0.965, 0.94, 0.975], [None, 0.975, 0.965], [None, None, 1.0]],
    "til_acc_matrix": [[0.965, 0.96, 0.98], [None, 1.0, 1.0], [None, None, 1.0]],
    "tii_acc_matrix": [[1.0, 0.99, 1.0], [None, 0.93, 0.965], [None, None, 1.0]],
}


def test_data_limits_fit_the_finite_values_inside_the_percent_range():
    from norga.reports.plot_scales import data_limits

    assert data_limits([94.0, 100.0, np.nan]) == pytest.approx((93.4, 100.0))  # padded, moved below 100
    assert data_limits([40.0, 60.0]) == pytest.approx((39.0, 61.0))  # 5 % of the span each side
    assert data_limits([50.0, 50.0]) == pytest.approx((49.45, 50.55))  # widened to 1 point, then padded
    assert data_limits([0.0, 0.2]) == pytest.approx((0.0, 1.1))  # moved above 0, width kept
    assert data_limits([np.nan]) == (0.0, 100.0)


def test_matrix_colour_scale_fits_the_data_with_one_decimal_labels():
    fig = plots.plot_acc_matrix(SMOKE_LIKE, [])
    cil, til = (ax for ax in fig.axes if ax.images)
    assert cil.images[0].get_clim() == pytest.approx((93.4, 100.0))  # not (0, 100)
    assert til.images[0].get_clim() == pytest.approx((95.6, 100.0))  # 96..100: span 4, 0.2 pad, moved below 100
    labels = sorted(t.get_text() for t in cil.texts)
    assert labels == ["100.0", "94.0", "96.5", "96.5", "97.5", "97.5"]
    colour_bars = [ax for ax in fig.axes if not ax.images and "scale" in ax.get_ylabel()]
    assert [ax.get_ylabel() for ax in colour_bars] == ["% (scale 93.4–100.0, fitted to the data)",
                                                      "% (scale 95.6–100.0, fitted to the data)"]


def test_average_and_task_curves_use_an_axis_fitted_to_the_points():
    ax = plots.plot_average_accuracy(SMOKE_LIKE, []).axes[0]
    points = np.concatenate([line.get_ydata() for line in ax.lines])
    assert points.min() == pytest.approx(95.75) and points.max() == pytest.approx(100.0)  # CIL A_1, TII A_0
    low, high = ax.get_ylim()
    assert low == pytest.approx(95.325) and high == pytest.approx(100.425)  # span 4.25, 10 % pad (up to 101)
    assert "axis 95.3–100.4, fitted to the data" in ax.get_ylabel()
    curves = plots.plot_task_curves(SMOKE_LIKE, []).axes[0]
    assert curves.get_ylim() == pytest.approx((93.4, 100.6))  # 94..100, 10 % pad
    wide = plots.plot_average_accuracy(METRICS, []).axes[0].get_ylim()
    assert wide == pytest.approx((44.0 + 1.0, 101.0))  # 53.3..100: 4.67 pad each side, moved below 101


def test_loss_series_counts_epochs_over_tasks():
    series = plots._stage_series(hand_records(), "wtp")
    assert sorted(series) == ["ce", "loss", "reg"]  # lr, steps, alpha, elapsed, time are not losses
    x, y, boundaries = series["loss"]
    assert list(x) == list(range(9)) and boundaries == [3, 6]
    assert y[:4] == pytest.approx([2.0, 1.0, 2 / 3, 1.0])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 2-task run on tiny synthetic data (1 epoch per stage), with one plot made to fail."""
    from norga.config import load_config
    from norga.engine.task_loop import run_training

    overrides = ["data.num_tasks=2", "data.classes_per_task=5", "data.options.num_classes=10",
                 "data.options.train_per_class=8", "data.options.test_per_class=4", "method.tii.epochs=1",
                 "method.tii.align_epochs=1", "method.wtp.epochs=1",
                 "method.tap.epochs=1", "method.tii.samples_per_class=8", "method.tap.samples_per_class=8"]
    out = tmp_path_factory.mktemp("plots") / "run"
    cfg = load_config(REPO / "configs" / "smoke.yaml", overrides)
    original = RUN_PLOTS["average_acc.png"]
    RUN_PLOTS["average_acc.png"] = lambda metrics, records: 1 / 0
    try:
        with pytest.warns(RuntimeWarning, match="average_acc.png failed"):
            metrics = run_training(cfg, out)
    finally:
        RUN_PLOTS["average_acc.png"] = original
    return out, metrics


def test_run_writes_valid_pngs_and_survives_a_failing_plot(tiny_run):
    out, metrics = tiny_run
    assert metrics["completed_tasks"] == 2  # the broken plot did not stop the run
    names = {p.name for p in (out / PLOT_DIR).iterdir()}
    assert names == {"acc_matrix.png", "task_acc.png", "tii_confusion.png", "loss.png"}
    for name in names:
        assert_png(out / PLOT_DIR / name)
    confusion = metrics["tii_confusion"]  # 2 tasks x 5 classes x 4 test images: rows of 20 samples
    assert [sum(row) for row in confusion] == [20, 20]
    assert [confusion[i][i] / 20 for i in range(2)] == pytest.approx(metrics["tii_accuracy"])
    assert "warning: plot average_acc.png failed" in (out / "log.txt").read_text()
    assert "progress: 2/2 tasks done" in (out / "log.txt").read_text()


def test_run_epoch_log_has_one_line_per_epoch_per_stage(tiny_run):
    """Documented keys; every stage ran 1 epoch here, so one line per (stage, task); WTP's loss terms."""
    from norga.toolkit.epochlog import read_epoch_log

    out, _ = tiny_run
    records = read_epoch_log(out)
    assert len(records) == len((out / "epochs.jsonl").read_text().splitlines())
    seen = {}
    for r in records:
        assert {"stage", "task", "epoch", "elapsed", "time"} <= set(r) and r["task"] in (0, 1)
        seen.setdefault((r["stage"], r["task"]), []).append(r["epoch"])
    assert all(epochs == [0] for epochs in seen.values()), seen  # every stage has epochs=1 in this run
    assert {("tii", 0), ("wtp", 0), ("tii", 1), ("wtp", 1)} <= set(seen)
    wtp = [r for r in records if r["stage"] == "wtp"]
    assert all(isinstance(r["loss"], float) and r["loss"] == pytest.approx(r["ce"] + r["reg"]) for r in wtp)
    assert all(len(r["alpha"]) == len(r["tau"]) == 2 for r in wtp)  # smoke config prompts blocks 0 and 1
