"""Mutation check: plant plausible wiring bugs in a copy of the package and check that the tests catch each.

    python tests/mutants.py                      # every mutant (`make mutants`: run it before a release)
    python tests/mutants.py --subset ci          # the CI subset (CI_SUBSET below; tests/test_mutants_run.py)
    python tests/mutants.py --only tap_uninstructed reg_sign --jobs 2

Each of the --jobs workers (default: one per core) copies the repository once (without runs/, .git, the venv)
to a temporary folder. For one mutant a worker applies one source edit in place (an exact string replacement
that must match once), runs the test files named for it with `pytest -x`, then puts the file back. The verdict:

* caught: pytest exits 1 with at least one failed (or erroring) test, and the same tests pass on the unmutated
  copy (the baseline, run once per distinct test selection);
* SURVIVED: the named tests pass with the mutant applied;
* ERROR: anything else, never counted as caught: the replacement no longer matches the source (the code has
  moved: update the mutant), the named tests fail without the mutant too, a collection or usage error, a
  missing test file, no test collected, a timeout, the package imported from somewhere other than the copy.

It prints one line per mutant and exits 1 if any mutant survived or errored. The mutants themselves are listed
in tests/mutants_pipeline.py and tests/mutants_adapters.py.
"""
from __future__ import annotations

import argparse
import itertools
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported by pytest from any folder
from mutants_adapters import ADAPTER_MUTANTS  # noqa: E402
from mutants_pipeline import Mutant, PIPELINE_MUTANTS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MUTANTS = PIPELINE_MUTANTS + ADAPTER_MUTANTS
IGNORED = shutil.ignore_patterns("runs", ".git", ".venv", "venv", "site", "__pycache__", ".pytest_cache",
                                 "*.egg-info", "build", "dist")
TIMEOUT = 1800.0  # seconds for one pytest run; a mutant that hangs is an error, not caught

# The subset CI runs (tests/test_mutants_run.py, marked slow): one mutant per methods module wherever a single cheap
# test catches it (no whole test file, no training run of more than a few seconds), so that the step takes about
# 160-195 s of CPU, baselines included (measured wall time with --jobs 2 on 2 cores: 83 s nearly idle, 104 s at load
# 2; 170 s on one of CI's two pytest-xdist workers: about 85 s more for the suite). The modules whose mutants are only
# caught by tests that train whole runs (slca.py, ranpac.py, adapter_stage.py, inflora.py, tuna.py, hidelora.py,
# hidelora_tii.py, mos.py) are left to `make mutants`, which runs the whole list (before a release). Keyed by
# mutant name, with the reason it was picked.
CI_SUBSET: Dict[str, str] = {
    # tests/test_loss_terms.py recomputes each method's loss by hand and is cheap: one file, seven modules
    "reg_on_uninstructed_means": "hideprompt.py (the WTP regulariser), via test_loss_terms",
    "tii_ce_over_seen_classes": "hide_stages.py (the TII head), via test_loss_terms",
    "l2p_pull_on_the_first_chosen_key": "l2p.py, via test_loss_terms",
    "dualprompt_pull_on_the_first_tasks_key": "dualprompt.py, via test_loss_terms",
    "coda_ortho_on_new_rows_only": "coda.py, via test_loss_terms",
    "sprompt_trains_the_previous_prompt": "sprompt.py, via test_loss_terms",
    "moe_aligns_on_the_tasks_classes_only": "methods/moe_adapters.py, via test_loss_terms",
    # shared toolkit code every method's statistics go through, with cheap test files
    "per_centroid_sampling_keeps_flat_clusters": "toolkit/gaussian.py (Gaussian replay), via test_gaussian",
    "named_streams_without_the_top_bit": "toolkit/seeding.py (the named random streams), via test_seeding",
    "sd_lora_optimizer_option_ignored": "sd_lora.py's optimizer option, via the cheap test_optimizers",
    # the adapter methods' pure parts, each caught by one by-hand unit test (no training run, seconds each)
    "slca_logit_norm_summed": "slca_heads.py, via test_slca::test_task_normalised_logits_by_hand",
    "aper_dot_product_for_cosine": "aper.py, via test_aper::test_concat_cosine_by_hand",
    "ease_alpha_not_divided": "ease.py, via test_ease::test_subspace_weights_by_hand",
    "hidelora_init_bound_over_width": "hidelora_parts.py, via test_hidelora::test_reference_init_is_uniform_...",
    "tuna_merge_by_mean": "tuna_parts.py, via test_tuna::test_elect_merge_by_hand",
    "mos_merge_mean_not_divided": "mos_parts.py, via test_mos::test_merge_by_hand",
}

EXIT_CODES = {2: "interrupted (collection errors?)", 3: "internal error", 4: "usage error (missing test file?)",
              5: "no tests collected"}


class MutantError(Exception):
    """A mutant that cannot be applied or reverted: its anchor text is gone or occurs more than once."""


class Outcome(NamedTuple):
    """One pytest run: its exit code, the counts from its JUnit XML, the failing node ids, its output's tail."""
    returncode: int
    passed: int
    failed: int  # failures and errors of collected tests (setup, call or teardown)
    failing: Tuple[str, ...]
    tail: str
    seconds: float


class Result(NamedTuple):
    name: str
    status: str  # "caught", "survived" or "error"
    seconds: float
    detail: str

    def line(self) -> str:
        label = {"caught": "caught  ", "survived": "SURVIVED", "error": "ERROR   "}[self.status]
        return f"{label} {self.name} ({self.seconds:.0f} s){': ' + self.detail if self.detail else ''}"


def anchored(mutant: Mutant, root: Path) -> str:
    """The text of the mutant's file in the tree at root; a :class:`MutantError` unless its anchor occurs once."""
    path = root / mutant.path
    if not path.is_file():
        raise MutantError(f"mutant {mutant.name}: {mutant.path} does not exist (the code has moved); update its "
                          "entry in tests/mutants_pipeline.py or tests/mutants_adapters.py")
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise MutantError(f"mutant {mutant.name}: the text to replace occurs {text.count(mutant.old)} times in "
                          f"{mutant.path} (expected once); update its entry in tests/mutants_pipeline.py or "
                          "tests/mutants_adapters.py")
    return text


def apply(mutant: Mutant, root: Path) -> str:
    """Write the mutant into the tree at root; return the file's original text (for :func:`revert`)."""
    path = root / mutant.path
    text = anchored(mutant, root)
    mutated = text.replace(mutant.old, mutant.new)
    if mutated == text:
        raise MutantError(f"mutant {mutant.name}: its replacement changes nothing")
    path.write_text(mutated)
    if path.read_text() != mutated:
        raise MutantError(f"mutant {mutant.name}: {mutant.path} did not take the mutated text")
    return text


def revert(mutant: Mutant, root: Path, original: str) -> None:
    path = root / mutant.path
    path.write_text(original)
    if path.read_text() != original:
        raise MutantError(f"mutant {mutant.name}: {mutant.path} could not be put back")


def child_env(root: Path, threads: int) -> Dict[str, str]:
    """The environment of a pytest run in the copy at root: the copy first on the path, no bytecode written (a
    mutated and a reverted file of one size within one second would otherwise share a stale .pyc), no pytest
    options inherited from an enclosing run (xdist, PYTEST_ADDOPTS), a fixed number of torch threads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run_pytest(root: Path, tests: Sequence[str], threads: int, timeout: float = TIMEOUT) -> Outcome:
    """`pytest -x` over tests in the copy at root, read back from its JUnit XML (not from its exit code alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        start = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                   f"--junitxml={xml}", *tests], cwd=root, capture_output=True, text=True,
                                  env=child_env(root, threads), timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(-1, 0, 0, (), f"timed out after {timeout:.0f} s", time.time() - start)
        seconds = time.time() - start
        passed = failed = 0
        failing: List[str] = []
        try:
            cases = list(ET.parse(xml).iter("testcase")) if xml.is_file() else []
        except ET.ParseError:  # a crashed pytest: no counts, so the verdict is an error
            cases = []
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failing.append(f"{case.get('classname')}::{case.get('name')}")
            elif case.find("skipped") is None:
                passed += 1
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        return Outcome(proc.returncode, passed, failed, tuple(failing), tail, seconds)


def problem(outcome: Outcome) -> Optional[str]:
    """Why a pytest run is neither a clean pass nor a clean test failure (None when it is one of the two)."""
    rc = outcome.returncode
    if rc == -1:
        return outcome.tail
    if rc == 0:
        return None if outcome.passed else "no test passed (all skipped?)"
    if rc == 1:
        return None if outcome.failed else "pytest exited 1 without a failed test"
    return f"pytest exit code {rc}: {EXIT_CODES.get(rc, 'unknown')}\n{outcome.tail}"


def verdict(mutant: Mutant, outcome: Outcome, baseline: Optional[Outcome]) -> Result:
    """caught, survived or error for one mutated run given the unmutated run of the same tests (None: not run)."""
    if baseline is not None:
        why = problem(baseline) or (None if baseline.returncode == 0 else
                                    f"{', '.join(baseline.failing)} failed\n{baseline.tail}")
        if why:
            return Result(mutant.name, "error", outcome.seconds,
                          f"the named tests do not pass on the unmutated copy (baseline): {why}")
    why = problem(outcome)
    if why:
        return Result(mutant.name, "error", outcome.seconds, why)
    if outcome.returncode == 0:
        return Result(mutant.name, "survived", outcome.seconds, f"{outcome.passed} test(s) passed")
    return Result(mutant.name, "caught", outcome.seconds, ", ".join(outcome.failing))


class Worker:
    """One copy of the repository (made once), mutated and put back in place, mutant after mutant."""

    def __init__(self, repo: Path, folder: Path):
        self.root = folder / repo.name
        shutil.copytree(repo, self.root, ignore=IGNORED)
        shared = repo.parent / "shared"  # tests/conftest.py looks for ../shared beside the repository
        if shared.is_dir():
            (folder / "shared").symlink_to(shared)
        self.checked: Dict[str, Optional[str]] = {}

    def import_problem(self, mutant: Mutant, threads: int) -> Optional[str]:
        """None when the mutated file's top-level package imports from this copy (once per package)."""
        package = Path(mutant.path).parts[0]
        if package not in self.checked:
            code = f"import importlib.util as u; s = u.find_spec({package!r}); print(s.origin if s else '')"
            out = subprocess.run([sys.executable, "-c", code], cwd=self.root, capture_output=True, text=True,
                                 env=child_env(self.root, threads)).stdout.strip()
            inside = out and Path(out).resolve().is_relative_to(self.root.resolve())
            self.checked[package] = None if inside else f"{package} imports from {out or 'nowhere'}, not the copy"
        return self.checked[package]


def run_mutants(mutants: Iterable[Mutant], jobs: Optional[int] = None, repo: Path = REPO, baseline: bool = True,
                report: Callable[[Result], None] = lambda r: None, timeout: float = TIMEOUT,
                threads: Optional[int] = None) -> List[Result]:
    """Every mutant's :class:`Result` (in the given order), on ``jobs`` workers (default: one per core), each
    pytest with ``threads`` torch threads (default: the cores shared out); report is called with each result."""
    mutants = list(mutants)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(jobs or cores, len(mutants) or 1))
    threads = threads or max(1, cores // jobs)
    baselines: Dict[Tuple[str, ...], Outcome] = {}
    locks: Dict[Tuple[str, ...], threading.Lock] = {m.tests: threading.Lock() for m in mutants}
    free: "queue.Queue[Worker]" = queue.Queue()

    def one(mutant: Mutant) -> Result:
        worker = free.get()
        try:
            start = time.time()
            why = worker.import_problem(mutant, threads)
            if why:
                return Result(mutant.name, "error", time.time() - start, why)
            try:
                anchored(mutant, worker.root)  # before any pytest run: a moved anchor costs nothing
            except MutantError as error:
                return Result(mutant.name, "error", time.time() - start, str(error))
            with locks[mutant.tests]:  # the unmutated run of these tests, once, in whichever copy comes first
                if baseline and mutant.tests not in baselines:
                    baselines[mutant.tests] = run_pytest(worker.root, mutant.tests, threads, timeout)
            try:
                original = apply(mutant, worker.root)
            except MutantError as error:
                return Result(mutant.name, "error", time.time() - start, str(error))
            try:
                outcome = run_pytest(worker.root, mutant.tests, threads, timeout)
            finally:
                revert(mutant, worker.root, original)
            return verdict(mutant, outcome, baselines.get(mutant.tests) if baseline else None)
        finally:
            free.put(worker)

    def reported(mutant: Mutant) -> Result:
        result = one(mutant)
        report(result)
        return result

    with tempfile.TemporaryDirectory(prefix="norga-mutants-") as tmp:
        for i in range(jobs):
            folder = Path(tmp) / f"worker{i}"
            folder.mkdir()
            free.put(Worker(repo, folder))
        # round robin over the test selections: the first mutants of every selection (and their baselines) go first,
        # so no worker waits on another's baseline of the same tests while there is other work
        groups: Dict[Tuple[str, ...], List[int]] = {}
        for i, mutant in enumerate(mutants):
            groups.setdefault(mutant.tests, []).append(i)
        order = [i for batch in itertools.zip_longest(*groups.values()) for i in batch if i is not None]
        with ThreadPoolExecutor(jobs) as pool:
            done = dict(zip(order, pool.map(reported, [mutants[i] for i in order])))
        return [done[i] for i in range(len(mutants))]


def summary(results: Sequence[Result]) -> str:
    survived = [r.name for r in results if r.status == "survived"]
    errors = [r.name for r in results if r.status == "error"]
    if not survived and not errors:
        return f"every mutant was caught ({len(results)})"
    return (f"{len(results) - len(survived) - len(errors)} of {len(results)} caught; "
            f"{len(survived)} SURVIVED {survived}; {len(errors)} ERROR {errors}")


def select(subset: str, only: Optional[Sequence[str]] = None) -> List[Mutant]:
    if only:
        return [m for m in MUTANTS if m.name in only]
    if subset == "ci":
        return [m for m in MUTANTS if m.name in CI_SUBSET]
    return list(MUTANTS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="mutants to try (names in tests/mutants_*.py)")
    parser.add_argument("--subset", choices=["all", "ci"], default="all", help="all mutants or the CI subset")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="parallel workers (default: one per core)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unmutated run of each test selection (faster; a failure is then trusted)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or ()) - {m.name for m in MUTANTS})
    if unknown:
        parser.error(f"no mutant named {', '.join(unknown)}")
    mutants = select(args.subset, args.only)
    start = time.time()
    results = run_mutants(mutants, args.jobs, baseline=not args.no_baseline,
                          report=lambda r: print(r.line(), flush=True))
    print(f"{summary(results)} in {time.time() - start:.0f} s")
    return 0 if all(r.status == "caught" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
