"""The protocols keep the evaluation data out of tuning: a spy on the data source fails a test if any test image of
the evaluation sequence is read before the final evaluation; the derived data sources by hand."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_tune_support import trial_table, write_spec

import norga.tune.run as tune_run
from norga.commands.cli import main as norga
from norga.data.derived_sources import carve_indices, class_subset_source, validation_carve_source
from norga.data.sources import SOURCES, DataError, RawData

CLASSES, TRAIN, TEST = 12, 8, 4
EVALUATION_CLASSES = set(range(6))  # heldout: the evaluation sequence is classes 0-5, tuning 6-11


def _write_images(folder: Path) -> None:
    """PNG files ``{train,test}/c{class}_{i}.png``: a colour per class plus noise (separable)."""
    rng = np.random.default_rng(0)
    for split, count in (("train", TRAIN), ("test", TEST)):
        (folder / split).mkdir(parents=True)
        for c in range(CLASSES):
            colour = np.array([c * 20 % 256, 255 - c * 20, (c * 77) % 256])
            for i in range(count):
                pixels = np.clip(colour + rng.normal(0, 10, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / split / f"c{c}_{i}.png")


def spy_source(root, download: bool, options: dict) -> RawData:
    """The PNG files under ``root`` as paths (decoded only when a dataset item is read)."""
    def split(name: str, count: int):
        paths = [str(Path(root) / name / f"c{c}_{i}.png") for c in range(CLASSES) for i in range(count)]
        return np.array(paths, dtype=object), np.repeat(np.arange(CLASSES), count).astype(np.int64)
    train_x, train_y = split("train", TRAIN)
    test_x, test_y = split("test", TEST)
    return RawData(train_x, train_y, test_x, test_y, [f"c{c}" for c in range(CLASSES)])


class Spy:
    """Records every image file opened, and whether the final evaluation had started."""

    def __init__(self):
        self.final_started = False
        self.early_test_reads = []  # test images of the evaluation sequence read before the final evaluation
        self.reads = 0

    def opened(self, path) -> None:
        self.reads += 1
        name = Path(str(path))
        if name.parent.name == "test" and int(name.stem[1:].split("_")[0]) in self.evaluation_classes:
            if not self.final_started:
                self.early_test_reads.append(name.name)


@pytest.fixture
def spy(tmp_path, monkeypatch):
    if "spy_files" not in SOURCES:
        SOURCES["spy_files"] = spy_source
    _write_images(tmp_path / "images")
    watcher = Spy()
    original_open, original_final = Image.open, tune_run.run_final

    def spied_open(path, *args, **kwargs):
        watcher.opened(path)
        return original_open(path, *args, **kwargs)

    def spied_final(*args, **kwargs):
        watcher.final_started = True
        return original_final(*args, **kwargs)

    monkeypatch.setattr(Image, "open", spied_open)
    monkeypatch.setattr(tune_run, "run_final", spied_final)
    return watcher


def _spec(tmp_path, protocol, heldout: bool):
    """Evaluation sequence: the spy files (classes 0-5 for heldout, all 12 otherwise) in 2 tasks."""
    common = f"root: {tmp_path / 'images'}, num_tasks: 2, transforms: backbone, image_size: 32"
    if heldout:
        subset = "options: {source: spy_files, classes: '0-5'}"
        data = f"data={{name: class_subset, {common}, classes_per_task: 3, {subset}}}"
    else:
        data = f"data={{name: spy_files, {common}, classes_per_task: 6}}"
    space = {"method.metric": {"type": "categorical", "choices": ["cosine", "euclidean"]}}
    return write_spec(tmp_path, trials=2, space=space, protocol=protocol, extra_set=[data],
                      seeds={"tune": [0], "final": [1]})


@pytest.mark.parametrize("protocol, heldout", [
    ({"name": "heldout", "tune_data": {"options": {"classes": "6-11"}}}, True),
    ({"name": "first_task", "fraction": 0.25}, False),
])
def test_no_test_image_of_the_evaluation_sequence_is_read_before_the_final_evaluation(tmp_path, spy, protocol,
                                                                                      heldout):
    spy.evaluation_classes = EVALUATION_CLASSES if heldout else set(range(CLASSES))
    spec = _spec(tmp_path, protocol, heldout)
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out")]) == 0
    assert spy.early_test_reads == [], f"tuning read evaluation test images: {spy.early_test_reads[:5]}"
    assert spy.final_started and spy.reads > 0
    final = json.loads((tmp_path / "out" / "final.json").read_text())
    assert final["label"] is None and final["protocol"] == protocol["name"]


def test_oracle_is_refused_without_its_flag(tmp_path, spy, capsys):
    spy.evaluation_classes = set(range(CLASSES))
    spec = _spec(tmp_path, {"name": "oracle"}, heldout=False)
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out")]) == 2
    assert "--oracle" in capsys.readouterr().err and spy.reads == 0 and not (tmp_path / "out").exists()


def test_oracle_with_its_flag_reads_the_test_images_and_says_oracle_everywhere(tmp_path, spy):
    spy.evaluation_classes = set(range(CLASSES))
    spec = _spec(tmp_path, {"name": "oracle"}, heldout=False)
    assert norga(["tune", str(spec), "--out", str(tmp_path / "out"), "--oracle"]) == 0
    assert spy.early_test_reads, "the spy must see the oracle's reads of the evaluation test images"
    out = tmp_path / "out"
    written = {p.relative_to(out).as_posix() for p in out.glob("*") if p.is_file()} | {
        f"plots/{p.name}" for p in (out / "plots").glob("*.png")}
    assert written >= {"trials_oracle.csv", "best_oracle.yaml", "final_oracle.md", "final_oracle.json",
                       "plots/history_oracle.png", "plots/importances_oracle.png"}
    assert not {"trials.csv", "best.yaml", "final.md"} & written
    assert all(r["protocol"] == "oracle" for r in trial_table(out, "trials_oracle.csv"))
    assert "ORACLE" in (out / "best_oracle.yaml").read_text().splitlines()[0]
    assert "ORACLE" in (out / "final_oracle.md").read_text().splitlines()[0]
    assert json.loads((out / "norga-tune.json").read_text())["label"] == "oracle"


# ---- the derived sources by hand --------------------------------------------------------------------------
def _raw(root, download, options):
    y = np.repeat(np.arange(4), 5)
    return RawData(np.arange(20).astype(object), y, (100 + np.arange(8)).astype(object), np.repeat(np.arange(4), 2),
                   ["a", "b", "c", "d"])


def test_a_class_subset_relabels_its_classes_and_keeps_only_them(monkeypatch):
    monkeypatch.setitem(SOURCES, "four", _raw)
    raw = class_subset_source(None, False, {"source": "four", "classes": [3, 1]})
    assert raw.class_names == ["b", "d"] and sorted(set(raw.train_y)) == [0, 1]
    assert list(raw.train_x[raw.train_y == 1]) == list(range(15, 20)) and len(raw.test_y) == 4
    with pytest.raises(DataError, match="class 7 does not exist"):
        class_subset_source(None, False, {"source": "four", "classes": "5-7"})


def test_the_validation_carve_comes_from_training_images_only(monkeypatch):
    monkeypatch.setitem(SOURCES, "four", _raw)
    raw = validation_carve_source(None, False, {"source": "four", "fraction": 0.4, "seed": 3})
    train, held = set(raw.train_x), set(raw.test_x)
    assert not train & held and train | held == set(range(20))  # no test image (100..107) anywhere
    assert np.bincount(raw.test_y).tolist() == [2, 2, 2, 2]
    assert carve_indices(np.repeat(np.arange(4), 5), 0.4, 3).tolist() == carve_indices(
        np.repeat(np.arange(4), 5), 0.4, 3).tolist()  # seeded
    with pytest.raises(DataError, match="fraction must be a number in"):
        validation_carve_source(None, False, {"source": "four", "fraction": 1.5})


@pytest.mark.parametrize("tuned, shared", [("3-8", "classes [3, 4, 5]"), ("6-11", None)])
def test_heldout_refuses_a_tuning_sequence_sharing_classes(tmp_path, tuned, shared):
    from norga.config import ConfigError
    from norga.tune import read_spec
    from norga.tune.protocols import checked_protocol

    subset = "data={name: class_subset, num_tasks: 2, options: {source: synthetic, classes: '0-5'}}"
    spec = read_spec(write_spec(tmp_path, protocol={"name": "heldout", "tune_data": {"options": {"classes": tuned}}},
                                extra_set=[subset]))
    if shared is None:
        assert checked_protocol(spec, oracle_allowed=False).name == "heldout"
    else:
        with pytest.raises(ConfigError, match=re.escape(f"the tuning sequence shares {shared}")):
            checked_protocol(spec, oracle_allowed=False)
