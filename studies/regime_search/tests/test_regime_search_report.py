"""studies/regime_search/search.py: the committed report is its rows' (--check needs no data or weights)."""
from __future__ import annotations

from studies.regime_search import search


def test_the_committed_report_is_the_rows():
    assert search.main(["--check"]) == 0
