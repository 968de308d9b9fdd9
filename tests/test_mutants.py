"""The planted bugs of tests/mutants.py still apply: each replacement matches its source exactly once.

A mutant whose text moved would make `python tests/mutants.py` stop; this catches that in the fast loop.
Running the mutants themselves (minutes each) stays a manual step: `python tests/mutants.py`.
"""
from __future__ import annotations

import pytest

from mutants import MUTANTS, REPO, apply


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_matches_its_source_once_and_names_existing_tests(mutant, tmp_path):
    text = (REPO / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: update its entry in tests/mutants_*.py, the code has moved"
    assert mutant.old != mutant.new
    copy = tmp_path / mutant.path
    copy.parent.mkdir(parents=True)
    copy.write_text(text)
    apply(mutant, tmp_path)
    assert copy.read_text() != text
    for test in mutant.tests:
        assert (REPO / test.split("::")[0]).is_file(), f"{mutant.name}: no test file {test}"


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
