"""The smoke run's figures in the docs come from bench/results/smoke.json, and a run of the smoke config gives them.

The generated blocks themselves are checked against the committed files by tests/test_readme.py (every
registered block); here: a changed measurement makes the pages stale, no page quotes the smoke figures or
times outside a generated block, the real-data CPU block quotes the nearest committed rows, and (slow) a
training run of configs/smoke.yaml reproduces the committed accuracies exactly.
"""
from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from conftest import REPO_ROOT, SMOKE

sys.path.insert(0, str(REPO_ROOT))

from bench import readme_tables, smoke_figures  # noqa: E402
from bench.row_merge import load_rows  # noqa: E402


def _committed() -> dict:
    record = smoke_figures.load()
    assert record, "bench/results/smoke.json is missing: run python -m bench.smoke_figures"
    return record


def test_the_committed_record_has_every_quoted_field():
    record = _committed()
    assert set(smoke_figures.FIGURES) <= set(record)
    assert record["complete_line"] == smoke_figures.complete_line(record)
    assert record["training_seconds"] > 0 and record["wall_seconds"] >= record["training_seconds"]
    assert {"cpu", "cores", "load_1min"} <= set(record["machine"]) and "torch" in record["versions"]


def test_a_changed_measurement_makes_the_pages_block_stale(tmp_path, monkeypatch):
    readme = (REPO_ROOT / "docs" / "getting-started.md").read_text()
    rows = load_rows(REPO_ROOT / "bench" / "results" / "evidence_cpu")
    assert readme_tables.stale_blocks(readme, rows) == []  # as committed
    changed = dict(_committed(), FA=0.97, training_seconds=99.0)
    (tmp_path / "smoke.json").write_text(json.dumps(changed))
    monkeypatch.setattr(smoke_figures, "RESULT", tmp_path / "smoke.json")
    assert readme_tables.stale_blocks(readme, rows) == ["smoke-figures"]
    fresh = readme_tables.render(readme, rows)
    assert "FA 0.9700" in fresh and "99.0 s of training" in fresh


def _outside_blocks(text: str) -> str:
    return readme_tables.MARKER.sub("", text)


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md", "docs/index.md", "docs/failure-behaviour.md",
                                  "docs/run-folder.md"])
def test_no_page_quotes_smoke_figures_or_times_by_hand(page):
    text = _outside_blocks((REPO_ROOT / page).read_text())
    assert "run complete: FA 0." not in text, f"{page}: quote the smoke figures with <!-- bench:smoke-figures -->"
    times = re.findall(r"\b\d+(?:\.\d+)? ?(?:s|sec|seconds|min|minutes?|CPU-minutes)\b", text)
    assert not times, f"{page}: hand-written time(s) {times}; state measured times in a generated block"


def test_ci_and_configs_state_no_hand_written_test_or_smoke_times():
    for path in (".ci/run", "Makefile", "setup.cfg", "configs/smoke.yaml"):
        text = (REPO_ROOT / path).read_text()
        assert not re.search(r"(~|about |under )\d+(\.\d+)? ?(s|sec|min|minutes?)\b", text, re.I), path


def test_the_real_data_cpu_block_names_the_nearest_committed_rows():
    mine = yaml.safe_load((REPO_ROOT / "configs" / "cifar100_dinov2_cpu.yaml").read_text())
    nearest = yaml.safe_load((REPO_ROOT / "configs" / "bench" / "cifar100_cpu.yaml").read_text())
    assert mine["data"]["train_per_class"] != nearest["data"]["train_per_class"]  # "nearest", not the same
    rows = json.loads(smoke_figures.FIRST_REGIME.read_text())
    lines = smoke_figures.dinov2_cpu_lines(rows)
    seed42 = next(r for r in rows if r["run"] == "norga_tanh" and r["seed"] == 42)
    assert f"seed 42: FA {100 * seed42['FA']:.2f}" in lines[0] and "No result" in lines[0]
    assert smoke_figures.dinov2_cpu_lines([]) == []


def _rounded(x):
    """Floats to 9 decimals inside lists (None kept): one test sample more or less moves an accuracy by 0.005."""
    return [_rounded(v) for v in x] if isinstance(x, list) else None if x is None else round(float(x), 9)


@pytest.mark.slow
def test_a_smoke_run_gives_exactly_the_committed_figures(tmp_path):
    """Trains configs/smoke.yaml (about as long as bench/results/smoke.json's training_seconds)."""
    from norga.config import load_config
    from norga.engine import run_training

    metrics = run_training(load_config(SMOKE), tmp_path / "smoke")
    record = _committed()
    for key in smoke_figures.FIGURES:
        assert _rounded(metrics[key]) == _rounded(record[key]), \
            f"{key}: this run {metrics[key]}, committed {record[key]}; if the change is intended, run " \
            "python -m bench.smoke_figures and python -m bench.readme_tables"
    assert smoke_figures.complete_line(metrics) == record["complete_line"]
