"""One run on two "nodes" (issue #69): torchrun's multi-node form (``--nnodes 2``, ``--rdzv-backend c10d``), rehearsed
on localhost as 2 nodes x 1 process (gloo). Each node is its own torchrun launcher meeting the other at the
rendezvous endpoint, as two SLURM nodes of a ``norga sweep --launcher slurm --nodes 2`` job do. The run equals the
single-node 2-process run exactly (same world size, same ranks: the same numbers) and, like it, matches one process
within tests/test_distributed_runs.py's tolerance (2 processes are not bitwise one process, by design: see there).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from faults import ENV, REPO, assert_same_metrics, train, train_args
from test_distributed_runs import FA_TOLERANCE

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # 5 torchrun processes: tens of seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SHORT = ["--set", "data.num_tasks=2", "--set", "data.options={num_classes: 4, train_per_class: 12, test_per_class: 6}"]


def torchrun(*launcher_args: str, out: Path, **popen):
    command = [sys.executable, "-m", "torch.distributed.run", *launcher_args, str(REPO / "train.py"),
               *train_args(out, *SHORT)]
    return subprocess.Popen(command, env={**ENV, "OMP_NUM_THREADS": "1"}, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def finish(proc) -> None:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]


def metrics(folder: Path) -> dict:
    """metrics.json without the checkout's commit (a commit made while the tests run is no difference of the runs)."""
    data = json.loads((folder / "metrics.json").read_text())
    for key in ("git_commit", "git_dirty"):
        data.get("norga", {}).pop(key, None)
    return data


def test_two_nodes_of_one_process_equal_one_node_of_two_and_match_one_process(tmp_path):
    endpoint, rdzv_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:8]
    nodes = [torchrun("--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                      f"--rdzv-id={rdzv_id}", out=tmp_path / "two_nodes") for _ in range(2)]
    for proc in nodes:
        finish(proc)
    finish(torchrun("--standalone", "--nproc-per-node=2", out=tmp_path / "one_node"))
    single = train(tmp_path / "one_process", *SHORT)
    assert single.returncode == 0, single.stderr[-3000:]
    two_nodes, one_node, one = (metrics(tmp_path / name) for name in ("two_nodes", "one_node", "one_process"))
    assert "2 processes (torchrun)" in (tmp_path / "two_nodes" / "log.txt").read_text()
    assert_same_metrics(two_nodes, one_node)
    assert abs(two_nodes["FA"] - one["FA"]) <= FA_TOLERANCE and two_nodes["num_tasks"] == one["num_tasks"] == 2
