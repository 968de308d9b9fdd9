"""Metrics on hand-made accuracy matrices (values checked by hand)."""
from __future__ import annotations

import math

import pytest

from norga.reports.metrics import summarize

# S[i][t]: accuracy on task i after task t (None where t < i)
S = [
    [0.9, 0.8, 0.7],
    [None, 0.6, 0.5],
    [None, None, 0.4],
]


def test_fa_ca_fm_bwt_by_hand():
    m = summarize(S)
    assert math.isclose(m["FA"], (0.7 + 0.5 + 0.4) / 3)
    # A_0 = 0.9, A_1 = (0.8 + 0.6) / 2 = 0.7, A_2 = (0.7 + 0.5 + 0.4) / 3
    assert math.isclose(m["CA"], (0.9 + 0.7 + 1.6 / 3) / 3)
    # FM: task 0 max over t<2 is 0.9 -> drop 0.2; task 1 max 0.6 -> drop 0.1
    assert math.isclose(m["FM"], (0.2 + 0.1) / 2)
    # BWT: (0.7 - 0.9 + 0.5 - 0.6) / 2
    assert math.isclose(m["BWT"], -0.15)


def test_fa_is_the_mean_of_the_last_column_over_tasks_not_samples():
    m = summarize([[1.0, 0.0], [None, 0.5]])
    assert math.isclose(m["FA"], 0.25)
    assert math.isclose(m["FM"], 1.0)


def test_single_task_and_bad_matrices():
    assert summarize([[0.42]]) == {"FA": 0.42, "CA": 0.42, "FM": 0.0, "FM_official": 0.0, "BWT": 0.0}
    with pytest.raises(ValueError, match="square"):
        summarize([[0.1, 0.2]])
    with pytest.raises(ValueError, match="missing entries"):
        summarize([[0.1, None], [None, 0.2]])


def test_fm_official_counts_the_last_column_in_the_max_by_hand():
    # task 0 peaks after task 1 (0.8), task 1 *improves* at the end (0.6 -> 0.7)
    S = [[0.5, 0.8, 0.6], [None, 0.6, 0.7], [None, None, 0.9]]
    m = summarize(S)
    # paper FM: max over t < 2 -> task 0: 0.8 - 0.6 = 0.2; task 1: 0.6 - 0.7 = -0.1; mean 0.05
    assert math.isclose(m["FM"], 0.05)
    # authors' code: max over all columns -> task 0: 0.8 - 0.6 = 0.2; task 1: 0.7 - 0.7 = 0; mean 0.1
    assert math.isclose(m["FM_official"], 0.1)


def test_coda_forgetting_is_the_mean_one_step_drop_by_hand():
    from norga.reports.metrics import as_matrix, forgetting_coda
    S = [[0.5, 0.8, 0.6], [None, 0.6, 0.7], [None, None, 0.9]]
    # t=1: (0.5 - 0.8) / 1 = -0.3; t=2: ((0.8 - 0.6) + (0.6 - 0.7)) / 2 = 0.05; mean over t: -0.125
    assert math.isclose(forgetting_coda(as_matrix(S)), -0.125)
    assert forgetting_coda(as_matrix([[0.3]])) == 0.0
