"""Mutation check: plant plausible wiring bugs in a copy of the package and check that the tests catch each.

    python tests/mutants.py                 # every mutant (about 1-3 minutes each on 2 cores)
    python tests/mutants.py --only tap_uninstructed reg_sign

For every mutant the script copies the repository (without runs/ and .git) to a temporary folder, applies
one source edit (an exact string replacement that must match once), runs the test files named for it and
expects at least one failure. It prints one line per mutant and exits 1 if any mutant survived (or if a
replacement no longer matches the source: then update the mutant, the code has moved). The mutants themselves
are listed in tests/mutants_pipeline.py and tests/mutants_adapters.py.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

from mutants_adapters import ADAPTER_MUTANTS
from mutants_pipeline import Mutant, PIPELINE_MUTANTS

REPO = Path(__file__).resolve().parents[1]
MUTANTS = PIPELINE_MUTANTS + ADAPTER_MUTANTS


def apply(mutant: Mutant, root: Path) -> None:
    path = root / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name}: the text to replace occurs {text.count(mutant.old)} times in "
                         f"{mutant.path} (expected once); update its entry in tests/mutants_pipeline.py or "
                         "tests/mutants_adapters.py")
    path.write_text(text.replace(mutant.old, mutant.new))


def run(mutant: Mutant) -> Tuple[bool, float]:
    """(caught, seconds): True when the named tests fail on the mutated copy."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(REPO, root, ignore=shutil.ignore_patterns("runs", ".git", ".venv", "venv", "site", "__pycache__",
                                                                  ".pytest_cache", "*.egg-info"))
        apply(mutant, root)
        start = time.time()
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutant.tests],
                                cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
        return result.returncode != 0, time.time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=[m.name for m in MUTANTS], help="mutants to try")
    args = parser.parse_args(argv)
    survivors = []
    for mutant in MUTANTS:
        if args.only and mutant.name not in args.only:
            continue
        caught, seconds = run(mutant)
        print(f"{'caught  ' if caught else 'SURVIVED'} {mutant.name} ({seconds:.0f} s)", flush=True)
        if not caught:
            survivors.append(mutant.name)
    print(f"{len(survivors)} mutant(s) survived: {survivors}" if survivors else "every mutant was caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
