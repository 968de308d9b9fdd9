"""The equal-budget study's report: the decision rule by hand, rows read from tune folders, the committed report
regenerated from its rows."""
from __future__ import annotations

import csv
import json

import pytest

from studies.equal_budget import report, run

SEEDS = (11, 12, 13, 14, 15)


def rows_of(**arms) -> dict:
    """Rows with ``arm=(tuned FA by seed, untuned FA by seed)``."""
    return {"collected": "2026-12-05", "arms": {
        arm: {"FA": {"best": dict(zip(map(str, SEEDS), best)), "default": dict(zip(map(str, SEEDS), default))},
              "best_values": {"method.wtp.lr": 0.0123456}, "final_seeds": list(SEEDS), "protocol": "heldout",
              "trials": {"COMPLETE": 4, "PRUNED": 1}, "trial_seconds": 100.0, "best_trial": 5,
              "first_finished": [0, 1, 2, 3, 4]}
        for arm, (best, default) in arms.items()}}


def test_the_relation_of_tuned_and_untuned_verdicts():
    assert report.relation(1, 1) == report.relation(-1, -1) == "kept"
    assert report.relation(1, -1) == report.relation(-1, 1) == "reversed"
    assert report.relation(0, 1) == report.relation(0, -1) == "lost by tuning"
    assert report.relation(1, 0) == report.relation(-1, 0) == "found by tuning"
    assert report.relation(0, 0) == "unresolved"


def test_a_pair_by_hand():
    a = [50.0, 51.0, 52.0, 53.0, 54.0]
    rows = rows_of(norga_tanh=(a, a), hideprompt=([x - 2 for x in a], [x + d for x, d in zip(a, (-1, 1, -1, 1, 0))]))
    line, what = report.pair_row(rows, "norga_tanh", "hideprompt")
    # tuned: every difference is +2 (std 0: the interval is the point); untuned: -(-1, 1, -1, 1, 0), mean 0
    assert line.startswith("| norga_tanh − hideprompt | +2.00 [+2.00, +2.00] | norga_tanh above | +0.00 [")
    assert "| not resolved | **found by tuning** |" in line and what == "found by tuning"
    gain = [x + 3 for x in a]  # tuned 3 points above untuned on every seed
    line = report.arm_row(rows_of(mos=(gain, a)), "mos")
    assert line.startswith("| mos | 55.00 [") and "| 52.00 [" in line and "| +3.00 [+3.00, +3.00] |" in line
    assert "4 complete, 1 pruned; best #5 (not among the first 5 finished)" in line  # a 6th trial was best
    assert "`method.wtp.lr=0.01235`" in line


def test_the_report_says_which_arms_and_pairs_are_missing():
    a = [50.0, 51.0, 52.0, 53.0, 54.0]
    text = report.report_text(rows_of(norga_tanh=(a, a), no_prompt=(a, a)))
    assert "| norga_tanh − hideprompt | – | not run yet |" in text
    assert "| norga_tanh − no_prompt | +0.00 [+0.00, +0.00] | not resolved |" in text
    assert text.rstrip().endswith("Arms not finished: hideprompt, mos, ranpac.")


def test_rows_are_collected_from_the_tune_folders(tmp_path):
    folder = tmp_path / "ranpac"
    folder.mkdir()
    values = {"FA": {"values": {"11": 60.0, "12": 61.0}}}
    (folder / "final.json").write_text(json.dumps({"arms": {"best": values, "default": values}, "protocol": "heldout",
                                                   "best_values": {"method.projection_dim": 900},
                                                   "final_seeds": [11, 12]}))
    with open(folder / "trials.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["number", "state", "FA", "seconds"])
        writer.writeheader()
        writer.writerows([{"number": 0, "state": "COMPLETE", "FA": "0.4", "seconds": "10.5"},
                          {"number": 1, "state": "FAIL", "FA": "", "seconds": ""},
                          {"number": 2, "state": "COMPLETE", "FA": "0.6", "seconds": "3"}])
    read = []
    in_run_folders = {"best_s11": 60.0, "best_s12": 61.0, "default_s11": 60.0, "default_s12": 61.0}
    rows = report.collect_rows(tmp_path, "2026-12-06", read_fa=lambda f: read.append(f) or in_run_folders[f.name])
    assert sorted(f.relative_to(tmp_path).as_posix() for f in read) == [
        f"ranpac/final/{name}" for name in sorted(in_run_folders)]  # every value read again from its run folder
    assert list(rows["arms"]) == ["ranpac"] and rows["collected"] == "2026-12-06"
    arm = rows["arms"]["ranpac"]
    assert arm["trials"] == {"COMPLETE": 2, "FAIL": 1} and arm["trial_seconds"] == 13.5
    assert arm["best_trial"] == 2 and arm["first_finished"] == [0, 2]  # the failed trial is not counted
    assert report.fa(rows, "ranpac", "best") == {11: 60.0, 12: 61.0}
    in_run_folders["default_s12"] = 59.0  # final.json edited, or a run folder replaced after it was written
    with pytest.raises(report.StaleRows, match="default_s12"):
        report.collect_rows(tmp_path, "2026-12-06", read_fa=lambda f: in_run_folders[f.name])
    with pytest.raises(report.StaleRows, match="not finished"):  # the real reader: no run there
        report.collect_rows(tmp_path, "2026-12-06")


def test_the_committed_report_is_its_rows():
    if not run.ROWS.is_file():
        pytest.skip(f"{run.ROWS.name} not collected yet: the study has not finished an arm")
    assert run.main(["--report", "--check"]) == 0
