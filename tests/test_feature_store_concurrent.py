"""The frozen-feature store under concurrent processes (issue #69): several real processes share one store, claim it
at the same moment, compute overlapping rows and read each other's parts while they are being written. Parts are
written as hidden temp files and renamed, so a reader never sees a torn part; no lock is held while computing; two
processes computing the same rows write the same part. Every process checks every row it gets against a fresh
computation, and a separate reader verifies the checksum of every part it can see, all the time the writers run.

    python tests/test_feature_store_concurrent.py writer ROOT SEED ROUNDS   # one process of the test
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration  # 4 processes importing torch: tens of seconds, outside the fast loop
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
N_IMAGES, WRITERS, ROUNDS, CLAIMS = 96, 3, 8, 30


class ToyData:
    """N deterministic 3 x 4 x 4 images (``images``: arrays, as an array data set keys them) with labels."""

    def __init__(self, index):
        rng = np.random.default_rng(0)
        every = rng.standard_normal((N_IMAGES, 3, 4, 4)).astype(np.float32)
        self.images = [every[i] for i in index]
        self.labels = [int(i) % 5 for i in index]
        self.transform = None

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        import torch

        return torch.from_numpy(self.images[i]), self.labels[i]


def toy_model():
    """A frozen 'backbone' whose features of a sample depend on that sample only (elementwise): (B, 3, 4, 4) ->
    (B, 16)."""
    from torch import nn

    class Toy(nn.Module):
        embed_dim = 16

        def forward(self, x, prompts=None):
            return (x.flatten(1)[:, :16] * 3.0 + 1.0).float()

    return Toy()


def writer(root: Path, seed: int, rounds: int) -> dict:
    """Claim the store (and CLAIMS fresh ones, at the same moment as the other writers), then ``rounds`` times: a
    fresh FeatureStore (reads the parts from disk) serves a random subset; every row must equal a fresh computation."""
    import torch

    from norga.toolkit.feature_store import FeatureStore
    from norga.toolkit.store_folder import check_store, claim_store

    warnings, wrong, read, computed = [], 0, 0, 0
    for j in range(CLAIMS):  # every writer claims the same new stores at once: the marker's temp file is seen
        check_store(root.parent / f"claims{j}")
        claim_store(root.parent / f"claims{j}")
    claim_store(root)
    model, rng = toy_model(), np.random.default_rng(seed)

    class Log:
        def warning(self, line):
            warnings.append(line)

    for _ in range(rounds):
        index = rng.choice(N_IMAGES, size=int(rng.integers(16, 64)), replace=False)
        data = ToyData(index)
        store = FeatureStore(root, "toy", {"device_type": "cpu"}, batch_size=8, log=Log())
        feats, _ = store.dataset_features(model, data, torch.device("cpu"), "toy")
        fresh = model(torch.stack([torch.from_numpy(im) for im in data.images]))
        wrong += int((feats != fresh).any(dim=1).sum())
        read, computed = read + store.read, computed + store.computed
    return {"warnings": warnings, "wrong_rows": wrong, "read": read, "computed": computed}


def reader(root: Path, seconds: float) -> dict:
    """For ``seconds``: list the parts and verify each one's checksum against its name (a torn part would fail)."""
    from safetensors.torch import load

    from norga.toolkit.feature_store import tensor_checksum

    seen, torn, deadline = 0, [], time.time() + seconds
    while time.time() < deadline:
        for path in root.glob("*/part-*.safetensors"):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            seen += 1
            if path.name != f"part-{tensor_checksum(load(data))[:32]}.safetensors":
                torn.append(path.name)
        time.sleep(0.005)
    return {"parts_read": seen, "torn": torn}


def test_concurrent_processes_share_a_store_and_never_read_a_torn_part(tmp_path):
    root = tmp_path / "store" / "features"
    root.parent.mkdir()
    script = str(Path(__file__))
    procs = [subprocess.Popen([sys.executable, script, "writer", str(root), str(seed), str(ROUNDS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
             for seed in range(WRITERS)]
    watch = subprocess.Popen([sys.executable, script, "reader", str(root), "4"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    out, err = watch.communicate(timeout=300)
    assert watch.returncode == 0, err[-3000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert all(r["wrong_rows"] == 0 for r in results), results  # every row served equals a fresh computation
    assert all(r["warnings"] == [] for r in results), results  # no part was ever found corrupt (torn)
    assert seen["torn"] == [] and seen["parts_read"] > 0, seen
    assert sum(r["read"] for r in results) > 0  # the writers did read each other's rows
    assert sum(r["computed"] for r in results) >= N_IMAGES  # and every image was computed by someone
    spaces = [p for p in root.iterdir() if p.is_dir()]
    assert len(spaces) == 1 and not list(spaces[0].glob(".*.tmp"))  # one space; no temp file left behind


if __name__ == "__main__":
    kind, where = sys.argv[1], Path(sys.argv[2])
    if kind == "writer":
        result = writer(where, int(sys.argv[3]), int(sys.argv[4]))
    else:
        result = reader(where, float(sys.argv[3]))
    print(json.dumps(result))
