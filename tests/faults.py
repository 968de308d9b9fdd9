"""Fault injection for the reliability tests: a tiny run config and a training process that kills itself.

    python tests/faults.py SPEC -- <norga train arguments>

SPEC:

* ``bar:<label>:<k>`` — SIGKILL inside the k-th (1-based) progress loop labelled
  ``<label>`` (case-insensitive, ``_`` = space), right after its first item: the
  stages' epoch loops ("TII", "TII align", "WTP", "TAP"), feature extraction
  ("frozen feats", "prompted feats") and "evaluation";
* ``write:<file name>:partial`` — SIGKILL after half of the file's temp copy is written;
* ``write:<file name>:after`` — SIGKILL right after the file is in place (e.g. a
  checkpoint written, its checksum not yet);
* ``write:<file name>:sigint`` — SIGINT (Ctrl-C) right after the file is in place: the
  interrupt arrives at a known point, whatever the machine's speed.

The process exits with -9 when a SIGKILL fault fired (130 after a handled SIGINT); a test
asserts that, so a renamed stage label fails the test instead of passing it vacuously.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"  # = conftest.SMOKE (faults also runs as a script, without conftest)
# a training process's threads: 2 alone, 1 under pytest-xdist (one worker per core; more threads only contend)
THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
ENV = {**os.environ, "OMP_NUM_THREADS": THREADS, "PYTHONPATH": str(REPO)}

# configs/smoke.yaml shrunk to 3 tasks x 2 classes and a few epochs: every stage runs, ~5 s of training
TINY = ["--set", "data.options={num_classes: 6, train_per_class: 12, test_per_class: 6}",
        "--set", "data.classes_per_task=2", "--set", "method.tii.epochs=2", "--set", "method.tii.align_epochs=2",
        "--set", "method.tii.samples_per_class=16", "--set", "method.wtp.epochs=2", "--set", "method.tap.epochs=2",
        "--set", "method.tap.samples_per_class=16"]


def train_args(out: Path, *extra: str) -> List[str]:
    return ["--config", str(SMOKE), "--output-dir", str(out), *TINY, *extra]


def train(out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``train.py`` on the tiny config in a fresh process."""
    return subprocess.run([sys.executable, str(REPO / "train.py"), *train_args(out, *extra)], capture_output=True,
                          text=True, timeout=timeout, env=ENV, cwd=REPO)


def train_with_fault(out: Path, spec: str, timeout: float = 600, args: Optional[List[str]] = None
                     ) -> subprocess.CompletedProcess:
    """The tiny run (or ``train.py`` with ``args``) with a fault (see module docstring) in a fresh process."""
    return subprocess.run([sys.executable, str(Path(__file__)), spec, "--", *(args or train_args(out))],
                          capture_output=True, text=True, timeout=timeout, env=ENV, cwd=REPO)


def tiny_method_args(out: Path, method: str) -> List[str]:
    """train.py arguments of a 3 x 2-class run of another method (``method`` = a ``method={...}`` override)."""
    return ["--config", str(SMOKE), "--output-dir", str(out), "--set", "data.classes_per_task=2",
            "--set", "data.options={num_classes: 6, train_per_class: 12, test_per_class: 6}", "--set", method]


def copy_run(source: Path, dest: Path, tasks: int) -> Path:
    """A copy of the run folder ``source`` keeping only the checkpoints of its first ``tasks`` tasks (a run that
    resumes there rewrites metrics.json from them first)."""
    shutil.copytree(source, dest)
    for path in (dest / "checkpoints").iterdir():
        if int(path.name[5:7]) >= tasks:
            path.unlink()
    return dest


def assert_kill_then_resume_matches(args_of, spec: str, tmp: Path, reference: Optional[Path] = None) -> None:
    """A run killed in its last task by fault ``spec`` and resumed ends with the uninterrupted run's metrics
    (``args_of(out)``: its train.py arguments). ``reference``: the uninterrupted run's folder when a fixture trained
    it already (else it is trained here). The killed process resumes a copy of the reference's earlier tasks and
    trains the last task only, so ``spec`` counts that task's loops (``bar:evaluation:1`` is its evaluation)."""
    import json

    from norga.commands.cli import main as norga
    from norga.engine.run_folder import RunDir

    if reference is None:
        reference = tmp / "ref"
        assert norga(["train", *args_of(reference)]) == 0
    last = RunDir(reference).scan().done - 1
    out = copy_run(reference, tmp / "run", last)
    killed = train_with_fault(out, spec, args=args_of(out))
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert RunDir(out).scan().done == last, "the fault fired outside the last task"
    assert norga(["train", *args_of(out)]) == 0
    final, ref = (json.loads((p / "metrics.json").read_text()) for p in (out, reference))
    assert_same_metrics(final, ref)


def error_lines(stderr: str) -> List[str]:
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.startswith("error:")]


def assert_one_line_error(returncode: int, stderr: str, *fragments: str, status: int = 2) -> str:
    """Exit status, exactly one 'error:' line containing every fragment, no traceback; returns the line."""
    lines = error_lines(stderr)
    assert returncode == status, (returncode, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1, lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def comparable(metrics: dict) -> dict:
    """Metrics without wall-clock times (equal between an interrupted+resumed run and an uninterrupted one)."""
    return {k: v for k, v in metrics.items() if k not in ("task_seconds",)}


# Relative tolerance of the method's float diagnostics (losses, prompt norms, gate values) between two runs
# that must agree. Every accuracy, count, matrix, class order and config value must be exactly equal; the
# diagnostics are raw floats of the training, and CPU BLAS (MKL) does not promise bitwise-equal floats from
# one process to the next (one CI run saw a resumed run differ there while every accuracy matched).
DIAGNOSTIC_RTOL = 1e-5


def metric_differences(got, want, path: str = "") -> List[str]:
    """Where two metrics.json trees differ, as ``path: got != want`` lines (empty: they agree).

    Exact everywhere, except floats under ``method`` (the method's training diagnostics), which may
    differ by ``DIAGNOSTIC_RTOL`` relative; ``task_seconds`` (wall clock) is ignored at the top level.
    """
    if isinstance(got, dict) and isinstance(want, dict):
        keys = [k for k in {**want, **got} if not (path == "" and k == "task_seconds")]
        return [line for k in keys for line in metric_differences(got.get(k, "<missing>"), want.get(k, "<missing>"),
                                                                   f"{path}.{k}" if path else str(k))]
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [line for i, (g, w) in enumerate(zip(got, want)) for line in metric_differences(g, w, f"{path}[{i}]")]
    tolerant = path.startswith("method") and all(isinstance(v, float) for v in (got, want))
    if tolerant and math.isclose(got, want, rel_tol=DIAGNOSTIC_RTOL):
        return []
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def assert_same_metrics(got: dict, want: dict) -> None:
    """``got`` has the metrics of ``want`` (see :func:`metric_differences`); the message lists each difference."""
    differences = metric_differences(got, want)
    assert not differences, "metrics differ:\n" + "\n".join(differences[:40])


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_in_bar(label: str, occurrence: int) -> None:
    import tqdm.auto

    base, seen = tqdm.auto.tqdm, {"n": 0}
    norm = lambda text: str(text or "").strip().lower().replace("_", " ")

    class KillingBar(base):
        def __iter__(self):
            hit = False
            if norm(self.desc) == norm(label):
                seen["n"] += 1
                hit = seen["n"] == occurrence
            for item in super().__iter__():
                yield item
                if hit:
                    _die()

    tqdm.auto.tqdm = KillingBar  # before norga is imported: the stages bind tqdm at import


def _kill_in_write(name: str, when: str) -> None:
    from norga import files
    from norga.engine import run_folder

    if when == "partial":
        write = files._write

        def partial(f, data, path):
            if Path(path).name == name:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                _die()
            write(f, data, path)

        files._write = partial
    else:
        atomic = run_folder.atomic_write_bytes
        signal_after = {"after": signal.SIGKILL, "sigint": signal.SIGINT}[when]

        def after(path, data):
            atomic(path, data)
            if Path(path).name == name:
                os.kill(os.getpid(), signal_after)

        run_folder.atomic_write_bytes = after


def main(argv: List[str]) -> int:
    spec, rest = argv[0], argv[argv.index("--") + 1:]
    kind, target, arg = spec.split(":")
    if arg == "sigint":  # a shell's background job starts with SIGINT ignored; a terminal's Ctrl-C is not
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if kind == "bar":
        _kill_in_bar(target, int(arg))
    else:
        _kill_in_write(target, arg)
    from norga.commands.cli import train_main

    return train_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
