"""``norga tune`` in one process: a study of smoke configs on SQLite, its outputs, continuing, pruning, bad specs."""
from __future__ import annotations

import json

import pytest
import yaml
from test_tune_support import study_trials, trial_table, tree, write_spec

from norga.commands.cli import main as norga
from norga.config import load_config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-trial study with its final evaluation (first_task protocol)."""
    folder = tmp_path_factory.mktemp("tune")
    spec = write_spec(folder, trials=2)
    assert norga(["tune", str(spec), "--out", str(folder / "out")]) == 0
    return spec, folder / "out"


def test_a_study_writes_its_table_best_config_plots_and_final_evaluation(finished):
    spec, out = finished
    rows = trial_table(out)
    assert [r["state"] for r in rows] == ["COMPLETE", "COMPLETE"] and all(r["protocol"] == "first_task" for r in rows)
    assert all((out / "trials" / f"000{i}_s0" / "norga-run.json").is_file() for i in range(2))  # normal run folders
    assert {p.name for p in (out / "plots").glob("*.png")} == {"history.png", "importances.png"}
    final = json.loads((out / "final.json").read_text())
    assert set(final["arms"]) == {"best", "default"} and final["final_seeds"] == [1, 2]
    assert sorted(p.name for p in (out / "final").iterdir()) == ["best_s1", "best_s2", "default_s1", "default_s2"]
    table = (out / "final.md").read_text()
    assert "| tuned |" in table and "| untuned default |" in table and "±" in table
    best = max(rows, key=lambda r: float(r["FA"]))
    assert final["best_values"]["method.metric"] == best["method.metric"]


def test_first_task_trials_stop_after_task_0(finished):
    _, out = finished
    trials = study_trials(out)
    assert all(sorted(t.intermediate_values) == [0] for t in trials)
    assert not (out / "trials" / "0000_s0" / "checkpoints" / "task_01.pt").exists()
    metrics = json.loads((out / "trials" / "0000_s0" / "metrics.json").read_text())
    assert metrics["data"]["derived"]["validation_carve"]["validation_images"] > 0


def test_the_best_config_is_a_config_norga_train_takes(finished, tmp_path):
    _, out = finished
    best = out / "best.yaml"
    assert best.read_text().startswith("# best of norga tune")
    searched = yaml.safe_load(best.read_text())
    assert load_config(best).method.metric == searched["method"]["metric"]
    assert norga(["train", "--config", str(best), "--output-dir", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "complete"


def test_running_again_continues_the_study(finished, tmp_path):
    spec, out = finished
    before = {t.number: t.params for t in study_trials(out)}
    spec_text = yaml.safe_load(spec.read_text())
    spec_text["budget"] = {"trials": 3}  # the budget may grow: the study is the same
    bigger = tmp_path / "spec.yaml"
    bigger.write_text(yaml.safe_dump(spec_text))
    assert norga(["tune", str(bigger), "--out", str(out), "--no-final"]) == 0
    after = study_trials(out)
    assert [t.number for t in after] == [0, 1, 2] and {t.number: t.params for t in after[:2]} == before


def test_pruning_stops_a_planted_poor_trial_after_its_first_task(tmp_path):
    """noise 50 makes every image noise: chance level after task 0, below the threshold pruner's 0.5."""
    space = {"data.options.noise": {"type": "categorical", "choices": [0.05, 50.0]}}
    spec = write_spec(tmp_path, trials=4, space=space, protocol={"name": "oracle"},
                      pruner={"name": "threshold", "lower": 0.5}, sampler={"seed": 1})
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out"), "--oracle", "--no-final"]) == 0
    trials = study_trials(tmp_path / "out")
    poor = [t for t in trials if t.params["data.options.noise"] == 50.0]
    good = [t for t in trials if t.params["data.options.noise"] == 0.05]
    assert poor and good, "the seeded sampler must try both values"
    assert all(t.state.name == "PRUNED" and sorted(t.intermediate_values) == [0] for t in poor)
    assert all(t.state.name == "COMPLETE" and sorted(t.intermediate_values) == [0, 1] for t in good)
    for t in poor:  # stopped at the boundary: task 0 saved, task 1 never trained
        run = tmp_path / "out" / "trials" / f"{t.number:04d}_s0"
        assert (run / "checkpoints" / "task_00.pt").is_file() and not (run / "checkpoints" / "task_01.pt").exists()


@pytest.mark.parametrize("change, message", [
    ({"epochs": 3}, "unknown key 'epochs'"),
    ({"space": {}}, "space is empty"),
    ({"space": {"method.metrik": {"type": "categorical", "choices": ["cosine"]}}}, "method.metrik"),
    ({"space": {"method.metric": {"type": "categorical", "choices": ["cosine", "manhattan"]}}}, "manhattan"),
    ({"space": {"seed": {"type": "float", "low": 2, "high": 1}}}, "low <= high"),
    ({"protocol": {"name": "peeking"}}, "unknown protocol 'peeking'"),
    ({"protocol": {"name": "oracle"}}, "--oracle"),
    ({"protocol": {"name": "heldout", "tune_data": {"class_order": "natural"}}}, "shares all classes"),
    ({"seeds": {"tune": [0], "final": [0, 1]}}, "fresh seeds"),
    ({"objective": "accuracy"}, "objective 'accuracy' is not a metric"),
])
def test_a_bad_spec_is_one_line_and_nothing_is_written(tmp_path, capsys, change, message):
    spec = write_spec(tmp_path)
    raw = {**yaml.safe_load(spec.read_text()), **change}
    spec.write_text(yaml.safe_dump(raw))
    before = tree(tmp_path)
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and message in err and "Traceback" not in err, err
    assert tree(tmp_path) == before


def test_a_folder_that_is_not_a_tune_folder_is_refused(tmp_path, capsys):
    spec = write_spec(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out")]) == 2
    assert "not a norga tune folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_the_final_table_goes_to_the_trackers_the_config_names(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from norga.tune import read_spec
    from norga.tune.final import log_to_trackers

    spec = read_spec(write_spec(tmp_path, extra_set=["logging.trackers=[tensorboard]"]))
    stat = {"mean": 97.5, "low": 95.0, "high": 100.0, "n": 2, "values": {}}
    log_to_trackers(tmp_path / "out", spec, {"arms": {"best": {"FA": stat}, "default": {"FA": {**stat, "mean": 90.0}}},
                                            "protocol": "first_task"})
    events = EventAccumulator(str(tmp_path / "out" / "tensorboard")).Reload()
    assert events.Scalars("final/best/FA_mean")[0].value == pytest.approx(97.5)
    assert events.Scalars("final/default/FA_mean")[0].value == pytest.approx(90.0)
    assert (tmp_path / "out" / "trackers.json").is_file()


def test_without_optuna_the_command_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "optuna", None)  # import optuna -> ImportError
    spec = write_spec(tmp_path)
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "pip install 'norga[tune]'" in err and not (tmp_path / "out").exists()
