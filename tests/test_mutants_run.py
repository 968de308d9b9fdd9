"""CI's mutation step: every mutant of the CI subset (tests/mutants.py, CI_SUBSET) is applied and caught.

Each mutant is written into a copy of the repository and the tests named for it must fail there, while passing on
the unmutated copy; a mutant whose anchor has moved, or whose tests error instead of failing, fails this test.
Every mutant runs with `make mutants` (before a release).
"""
from __future__ import annotations

import os

import pytest

from mutants import CI_SUBSET, run_mutants, select, summary


@pytest.mark.slow
def test_every_mutant_of_the_ci_subset_is_applied_and_caught():
    # under pytest-xdist (CI: one worker per core) this test holds one core: one mutant at a time, one torch thread
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    results = run_mutants(select("ci"), jobs=1 if xdist else None, threads=1 if xdist else None)
    assert sorted(r.name for r in results) == sorted(CI_SUBSET)
    assert all(r.status == "caught" for r in results), summary(results) + "\n" + "\n".join(
        r.line() for r in results if r.status != "caught")
