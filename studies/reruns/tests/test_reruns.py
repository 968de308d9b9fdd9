"""studies/reruns/reruns.py: the re-run table (old rows beside new ones), numbers worked out by hand."""
from __future__ import annotations

import math

import pytest

from studies.reruns import reruns

T1 = 12.706205  # t_{0.975} with 1 degree of freedom
T4 = 2.776445  # t_{0.975} with 4 degrees of freedom


def _row(run, seed, fa, til):
    return {"run": run, "seed": seed, "FA": fa, "CA": fa, "FM": 0.1, "TIL_FA": til, "minutes": 1.0}


def _rows():
    """Arm a: re-run complete (new rows under "a", old under "a@shared_stream"); arm b: 2 of 5 seeds re-run."""
    rows = [_row("a@shared_stream", s, 0.40, 0.70) for s in range(1, 6)]
    rows += [_row("a", s, 0.40 + 0.01 * s, 0.70) for s in range(1, 6)]  # new − old FA: 1, 2, 3, 4, 5 points
    rows += [_row("b", s, 0.50, 0.80) for s in range(1, 6)]
    rows += [_row("b@named_streams", 1, 0.52, 0.81), _row("b@named_streams", 2, 0.56, 0.79)]
    rows += [_row("c", s, 0.30, 0.60) for s in range(1, 6)]  # never re-run: no line
    return rows


def test_rerun_lines_by_hand():
    lines = reruns.rerun_lines(_rows())
    assert lines[0] == "| arm | seeds | status | new FA | old FA | new − old FA | new − old TIL_FA |"
    half_a = T4 * math.sqrt(2.5) / math.sqrt(5)  # differences 1..5: mean 3, sample variance 2.5
    assert lines[2] == (f"| a | 5 | complete: the tables show the new rows | 43.00 | 40.00 | "
                        f"+3.00 [{3 - half_a:+.2f}, {3 + half_a:+.2f}] *resolved* | +0.00 [+0.00, +0.00] |")
    half_b = T1 * math.sqrt(8) / math.sqrt(2)  # FA differences 2 and 6 points: mean 4, sample std sqrt(8)
    half_til = T1 * math.sqrt(2) / math.sqrt(2)  # TIL differences +1 and −1: mean 0, sample std sqrt(2)
    assert lines[3] == (f"| b | 2 | 2 of 5 seeds: the tables show the old rows | 54.00 | 50.00 | "
                        f"+4.00 [{4 - half_b:+.2f}, {4 + half_b:+.2f}] | "
                        f"+0.00 [{-half_til:+.2f}, {half_til:+.2f}] |")
    assert len(lines) == 4


def test_one_seed_shows_its_difference_without_interval():
    rows = [_row("b", 1, 0.50, 0.80), _row("b@named_streams", 1, 0.47, 0.80)]
    assert reruns.rerun_lines(rows)[2] == ("| b | 1 | 1 of 5 seeds: the tables show the old rows | 47.00 | 50.00 | "
                                           "-3.00 | +0.00 |")  # ASCII minus: render() makes it typographic


def test_no_rerun_no_table_and_the_report_says_so():
    rows = [_row("c", s, 0.30, 0.60) for s in range(1, 6)]
    assert reruns.rerun_lines(rows) == []
    assert "No arm has been re-run." in reruns.report_text(rows)


@pytest.mark.parametrize("rows, message", [
    ([_row("a", 1, 0.4, 0.7), _row("a@shared_stream", 1, 0.4, 0.7), _row("a@named_streams", 1, 0.4, 0.7)],
     "both a@shared_stream and a@named_streams"),
    ([_row("a", s, 0.4, 0.7) for s in range(1, 5)] + [_row("a@shared_stream", s, 0.4, 0.7) for s in range(1, 6)],
     "'a' has 4 seeds, not 5"),
])
def test_mixed_labels_raise_one_clear_error(rows, message):
    with pytest.raises(ValueError, match=message):
        reruns.rerun_lines(rows)


def test_the_committed_report_is_the_rows():
    """studies/reruns/reruns.md is what the committed evidence rows give (the generator's --check)."""
    assert reruns.main(["--check"]) == 0
