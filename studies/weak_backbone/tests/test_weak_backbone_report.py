"""studies/weak_backbone/report.py: the builds' table and base on each rebuild, by hand and on the committed files."""
from __future__ import annotations

import json

import pytest

from studies.weak_backbone import report


def _base_rows(deltas):
    """weak_cifar ``base`` rows whose per-seed delta (mean of tasks 0 and 1) is ``deltas[seed]`` in pp."""
    return [{"regime": "weak_cifar", "level": "base", "seed": s, "task": t, "delta": d / 100}
            for s, d in deltas.items() for t in (0, 1)]


def test_base_on_a_rebuild_is_paired_by_seed_with_the_first_build(tmp_path, monkeypatch):
    first = {1: 1.0, 2: 2.0, 3: 3.0}
    rebuilt = {1: 2.0, 2: 3.0, 3: 4.0}  # +1 pp on every seed
    monkeypatch.setattr(report, "GRID_ROWS", tmp_path / "grid")
    (tmp_path / "grid.json").write_text(json.dumps(_base_rows(first)))
    monkeypatch.setattr(report, "HERE", tmp_path)
    monkeypatch.setattr(report, "BUILDS", {"first": ("a", None, "x"), "again": ("b", "b_base", "y")})
    (tmp_path / "b_base.json").write_text(json.dumps(_base_rows(rebuilt)))
    lines = report.base_lines()
    assert lines[2].startswith("| again | 3 | +3.00 [") and "| +2.00 [" in lines[2]
    assert lines[2].endswith("| +1.00 [+1.00, +1.00] *resolved* |")


def test_a_build_row_quotes_its_report(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "HERE", tmp_path)
    monkeypatch.setattr(report, "BUILDS", {"first": ("a", None, "here")})
    (tmp_path / "a.json").write_text(json.dumps({"backbone_sha256": "ab" * 32, "epochs": 20,
                                                 "test_acc_classes_50_99": 0.5012,
                                                 "linear_probe_acc_classes_0_49": 0.4108}))
    assert report.build_lines()[2] == f"| first | `{'ab' * 8}` | 20 | 50.1% | 41.1% | here |"


def test_the_committed_report_is_current():
    """studies/weak_backbone/weak_backbone.md is what the committed reports and rows give (--check)."""
    assert report.main(["--check"]) == 0


def test_check_names_a_stale_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "REPORT", tmp_path / "weak_backbone.md")
    (tmp_path / "weak_backbone.md").write_text("old\n")
    assert report.main(["--check"]) == 1
    assert "weak_backbone.md: differs from its rows" in capsys.readouterr().err
    assert report.main([]) == 0 and report.main(["--check"]) == 0
    with pytest.raises(SystemExit):
        report.main(["--bogus"])
