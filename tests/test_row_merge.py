"""bench/row_merge.py and ``bench.real_data_cpu --merge``: rows of parallel processes merged into one file."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from bench import real_data_cpu  # noqa: E402
from bench.row_merge import MergeError, merge_rows  # noqa: E402

ARMS = ["hideprompt", "no_prompt", "l2p"]


def _row(run, seed, fa=0.5):
    return {"run": run, "seed": seed, "FA": fa, "CA": fa, "FM": 0.1, "TIL_FA": 0.7, "minutes": 1.0, "threads": 1}


def test_lanes_are_appended_in_order_and_an_identical_row_is_taken_once():
    existing = [_row("hideprompt", 1), _row("no_prompt", 1)]
    lane_a = [_row("l2p", 1, 0.3), _row("no_prompt", 1)]  # the second is already merged, unchanged
    lane_b = [_row("l2p@named_streams", 2, 0.4), _row("l2p", 1, 0.3)]  # the same l2p row as lane a
    merged, added, replaced = merge_rows(existing, [("a", lane_a), ("b", lane_b)], ARMS)
    assert merged == [*existing, _row("l2p", 1, 0.3), _row("l2p@named_streams", 2, 0.4)]
    assert added == [("l2p", 1), ("l2p@named_streams", 2)] and replaced == []


def test_a_differing_row_needs_replace_and_then_takes_the_old_rows_place():
    existing = [_row("l2p", 1, 0.3), _row("no_prompt", 1)]
    lane = [("a", [_row("l2p", 1, 0.35)])]
    with pytest.raises(MergeError, match="already hold other values for l2p seed 1; pass --replace"):
        merge_rows(existing, lane, ARMS)
    merged, added, replaced = merge_rows(existing, lane, ARMS, "replace")
    assert merged == [_row("l2p", 1, 0.35), _row("no_prompt", 1)] and added == [] and replaced == [("l2p", 1)]


def test_keep_holds_the_old_row_of_a_rerun_whose_results_agree_and_refuses_one_whose_results_differ():
    existing = [_row("l2p", 1, 0.3), _row("no_prompt", 1)]
    rerun = {**_row("l2p", 1, 0.3), "minutes": 0.5, "TIL_FA": 0.7000001}  # another machine: other time, float noise
    merged, added, kept = merge_rows(existing, [("a", [rerun, _row("l2p", 2, 0.4)])], ARMS, "keep")
    assert merged == [*existing, _row("l2p", 2, 0.4)] and added == [("l2p", 2)] and kept == [("l2p", 1)]
    with pytest.raises(MergeError, match=r"--keep: the lanes' rows differ from the held ones in a result "
                                         r"\(FA, CA, FM\) for l2p seed 1: a re-run that does not reproduce"):
        merge_rows(existing, [("a", [_row("l2p", 1, 0.31)])], ARMS, "keep")
    twice = [("a", [rerun]), ("b", [{**rerun, "minutes": 0.7}])]  # two lanes re-ran it: results agree
    assert merge_rows([], twice, ARMS, "keep")[0] == [rerun]
    with pytest.raises(MergeError, match="a and b both hold l2p seed 1 with different values"):
        merge_rows([], twice, ARMS)
    with pytest.raises(MergeError, match="a and b both hold l2p seed 1 with different values"):
        merge_rows([], [("a", [rerun]), ("b", [_row("l2p", 1, 0.31)])], ARMS, "keep")
    with pytest.raises(ValueError, match="on_clash 'overwrite'"):
        merge_rows(existing, [("a", [rerun])], ARMS, "overwrite")


def test_keep_refuses_rows_that_lack_the_results_it_compares():
    bare = {"run": "l2p", "seed": 1, "minutes": 1.0}  # no FA / CA / FM: nothing to tell a re-run by
    existing = [bare]
    with pytest.raises(MergeError, match=r"--keep: a held or incoming row of l2p seed 1 has no FA / CA / FM"):
        merge_rows(existing, [("a", [{**bare, "minutes": 2.0}])], ARMS, "keep")
    with pytest.raises(MergeError, match=r"--keep: a held or incoming row of l2p seed 1 has no FA / CA / FM"):
        merge_rows([_row("l2p", 1)], [("a", [{**bare, "minutes": 2.0}])], ARMS, "keep")
    with pytest.raises(MergeError, match="a and b both hold l2p seed 1 with different values"):
        merge_rows([], [("a", [bare]), ("b", [{**bare, "minutes": 2.0}])], ARMS, "keep")


@pytest.mark.parametrize("lanes, message", [
    ([("a", [_row("l2p", 1, 0.3)]), ("b", [_row("l2p", 1, 0.31)])], "a and b both hold l2p seed 1"),
    ([("a", [_row("sd_lora", 1)])], "row sd_lora seed 1 is not an arm of this regime"),
    ([("a", [])], "a: no rows"),
])
def test_conflicts_unknown_arms_and_empty_lanes_raise(lanes, message):
    with pytest.raises(MergeError, match=message):
        merge_rows([], lanes, ARMS)


def test_the_cli_merges_lanes_writes_the_report_and_names_errors(tmp_path, capsys):
    results, lane = tmp_path / "results", tmp_path / "lane"
    results.with_suffix(".json").write_text(json.dumps([_row("hideprompt", s, 0.6) for s in (1, 2)]))
    lane.with_suffix(".json").write_text(json.dumps([_row("no_prompt", s, 0.5) for s in (1, 2)]))
    assert real_data_cpu.main(["--merge", str(lane), "--results", str(results)]) == 0
    assert "2 rows added, 0 replaced, 4 in all" in capsys.readouterr().out
    rows = json.loads(results.with_suffix(".json").read_text())
    assert [(r["run"], r["seed"]) for r in rows] == [("hideprompt", 1), ("hideprompt", 2), ("no_prompt", 1),
                                                     ("no_prompt", 2)]
    assert "| hideprompt − no_prompt | 2 | +10.00 [+10.00, +10.00] *resolved*" in results.with_suffix(".md").read_text()
    lane.with_suffix(".json").write_text(json.dumps([_row("no_prompt", 1, 0.45)]))
    with pytest.raises(SystemExit, match="pass --replace"):
        real_data_cpu.main(["--merge", str(lane), "--results", str(results)])
    with pytest.raises(SystemExit):
        real_data_cpu.main(["--replace", "--results", str(results)])
    assert "--replace goes with --merge" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        real_data_cpu.main(["--merge", str(lane), "--keep", "--replace", "--results", str(results)])
    assert "not allowed with argument" in capsys.readouterr().err
    lane.with_suffix(".json").write_text(json.dumps([{**_row("no_prompt", 1, 0.5), "minutes": 2.0}]))
    assert real_data_cpu.main(["--merge", str(lane), "--keep", "--results", str(results)]) == 0
    assert "0 rows added, 1 kept (re-run, results agree), 4 in all" in capsys.readouterr().out
    assert json.loads(results.with_suffix(".json").read_text())[2] == _row("no_prompt", 1, 0.5)


def test_a_rows_file_round_trips_and_a_missing_one_holds_no_rows(tmp_path):
    from bench.row_merge import load_rows, rows_path, save_rows

    stem = tmp_path / "lanes" / "a"
    assert load_rows(stem) == [] and not rows_path(stem).parent.exists()
    rows = [_row("l2p", 1), _row("no_prompt", 2, 0.25)]
    save_rows(stem, rows)  # creates lanes/
    assert rows_path(stem) == tmp_path / "lanes" / "a.json"
    assert json.loads((tmp_path / "lanes" / "a.json").read_text()) == rows
    assert load_rows(tmp_path / "lanes" / "a.json") == rows == load_rows(stem)  # the stem or the file
    assert [p.name for p in (tmp_path / "lanes").iterdir()] == ["a.json"]  # no temporary file left behind


def test_a_results_stem_keeps_a_dot_in_its_name_and_drops_only_a_results_suffix(tmp_path):
    from bench.row_merge import load_rows, result_file, save_rows

    stem = tmp_path / "lanes" / "lr_x0.1"  # a level's name as a lane's stem
    assert result_file(stem, ".json") == tmp_path / "lanes" / "lr_x0.1.json"
    assert result_file(stem, ".md") == tmp_path / "lanes" / "lr_x0.1.md"
    for named in ("lr_x0.1.json", "lr_x0.1.md", "lr_x0.1.png"):  # a results file names its stem
        assert result_file(tmp_path / "lanes" / named, ".png") == tmp_path / "lanes" / "lr_x0.1.png"
    save_rows(stem, [_row("l2p", 1)])
    assert [p.name for p in (tmp_path / "lanes").iterdir()] == ["lr_x0.1.json"]
    assert load_rows(stem) == [_row("l2p", 1)]
    with pytest.raises(ValueError, match="unknown results suffix '.csv'"):
        result_file(stem, ".csv")


def test_rows_with_keeps_the_rows_whose_fields_all_match():
    from bench.row_merge import rows_with

    rows = [_row("l2p", 1), _row("l2p", 2), _row("no_prompt", 1)]
    assert rows_with(rows, run="l2p") == rows[:2]
    assert rows_with(rows, run="l2p", seed=2) == [rows[1]]
    assert rows_with(rows, run="l2p", seed=3) == []
    assert rows_with(rows, missing_field=None) == rows  # an absent field reads as None
