"""The planted bugs of tests/mutants.py still apply, and the runner's verdicts mean what they say.

Every replacement matches its source exactly once (a mutant whose text moved fails here, in the fast loop, and
is an ERROR of `python tests/mutants.py`, never "caught"). The runner itself is checked on a tiny fake
repository: a mutant the tests see is caught, one they cannot see survives, a missing anchor, a missing test
file or tests that fail without the mutant are errors. The CI subset runs in tests/test_mutants_run.py (slow);
every mutant with `make mutants`.
"""
from __future__ import annotations

import pytest

import mutants
from mutants import CI_SUBSET, MUTANTS, REPO, Mutant, MutantError, apply, revert, run_mutants


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_matches_its_source_once_and_names_existing_tests(mutant, tmp_path):
    text = (REPO / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: update its entry in tests/mutants_*.py, the code has moved"
    assert mutant.old != mutant.new
    copy = tmp_path / mutant.path
    copy.parent.mkdir(parents=True)
    copy.write_text(text)
    assert apply(mutant, tmp_path) == text
    assert copy.read_text() != text
    revert(mutant, tmp_path, text)
    assert copy.read_text() == text
    for test in mutant.tests:
        file, _, function = test.partition("::")
        assert (REPO / file).is_file(), f"{mutant.name}: no test file {test}"
        assert not function or f"def {function.split('[')[0]}(" in (REPO / file).read_text(), f"no test {test}"


def test_mutant_names_are_unique_and_the_ci_subset_names_real_mutants():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert set(CI_SUBSET) <= set(names)


# ---- the runner on a fake repository (a package `pkg` and its tests; each pytest run takes about a second) ----
SOURCE = "def double(x):\n    return 2 * x  # the doubling\n"
TESTS = {
    "test_double.py": "from pkg.mod import double\n\n\ndef test_double():\n    assert double(3) == 6\n",
    "test_other.py": "def test_other():\n    assert True\n",
    "test_broken.py": "def test_broken():\n    assert False\n",
    "test_uncollectable.py": "import no_such_module_anywhere\n\n\ndef test_x():\n    pass\n",
}


def fake(name, old="return 2 * x", new="return 3 * x", tests=("tests/test_double.py",)):
    return Mutant(name, "pkg/mod.py", old, new, tuple(tests))


@pytest.fixture
def fake_repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(SOURCE)
    (root / "tests").mkdir()
    for name, text in TESTS.items():
        (root / "tests" / name).write_text(text)
    return root


def verdicts(results):
    return {r.name: r.status for r in results}


def test_the_runner_tells_caught_from_survived_from_errors(fake_repo):
    results = run_mutants([
        fake("seen"),
        fake("unseen", "# the doubling", "# the tripling"),
        fake("unseen_by_its_tests", tests=("tests/test_other.py",)),
        fake("anchor_gone", old="return 4 * x"),
        fake("no_test_file", tests=("tests/test_nowhere.py",)),
        fake("tests_fail_without_it", tests=("tests/test_broken.py",)),
        fake("collection_error", tests=("tests/test_uncollectable.py",)),
    ], jobs=2, repo=fake_repo)
    assert verdicts(results) == {"seen": "caught", "unseen": "survived", "unseen_by_its_tests": "survived",
                                 "anchor_gone": "error", "no_test_file": "error", "tests_fail_without_it": "error",
                                 "collection_error": "error"}
    why = {r.name: r.detail for r in results}
    assert "anchor_gone" in why["anchor_gone"] and "occurs 0 times" in why["anchor_gone"]
    assert "exit code 4" in why["no_test_file"]
    assert "baseline" in why["tests_fail_without_it"]
    assert "test_double" in why["seen"]
    assert (fake_repo / "pkg" / "mod.py").read_text() == SOURCE  # the repository itself is never touched


def test_one_worker_puts_each_mutant_back_before_the_next(fake_repo):
    # in one copy, in order: were the first mutant left in place, the comment-only one after it would be caught
    results = run_mutants([fake("seen"), fake("unseen", "# the doubling", "# the tripling"), fake("seen_again")],
                          jobs=1, repo=fake_repo)
    assert verdicts(results) == {"seen": "caught", "unseen": "survived", "seen_again": "caught"}


def test_without_a_baseline_a_failure_is_trusted_but_errors_stay_errors(fake_repo):
    results = run_mutants([fake("tests_fail_without_it", tests=("tests/test_broken.py",)),
                           fake("no_test_file", tests=("tests/test_nowhere.py",))], jobs=1, repo=fake_repo,
                          baseline=False)
    assert verdicts(results) == {"tests_fail_without_it": "caught", "no_test_file": "error"}


def test_main_exits_non_zero_and_names_a_mutant_whose_anchor_is_gone(fake_repo, monkeypatch, capsys):
    monkeypatch.setattr(mutants, "REPO", fake_repo)
    monkeypatch.setattr(mutants, "MUTANTS", (fake("seen"), fake("anchor_gone", old="return 4 * x")))
    monkeypatch.setattr(mutants, "run_mutants", lambda *a, **k: run_mutants(*a, **{**k, "repo": fake_repo}))
    assert mutants.main(["--jobs", "1"]) == 1
    out = capsys.readouterr().out
    assert "ERROR    anchor_gone" in out and "caught   seen" in out and "ERROR ['anchor_gone']" in out
    with pytest.raises(MutantError, match="occurs 0 times"):
        apply(fake("anchor_gone", old="return 4 * x"), fake_repo)
