"""Gaussian draws on the run's device (issue #68): the CPU draws are bit for bit those of the CPU-only code,
the device generator is seeded by one draw of the run's CPU generator, the statistics move to the device.

No CUDA here: the CUDA generator itself is stood in for (``new_generator`` monkeypatched, a generator that
reports the meta device). What these tests cannot show is the values a real CUDA generator draws.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import pytest
import torch
from torch import Tensor

from norga.toolkit import gaussian, stages
from norga.toolkit.gaussian import GaussianStore, draw_generator

CASES = [("covariance", "by_weight"), ("variance", "by_weight"), ("multi_centroid", "by_weight"),
         ("multi_centroid", "per_centroid")]


# ---- today's CPU sampling, written out (norga/toolkit/gaussian.py before issue #68) -----------------------
def reference_one(kind: str, s: Dict[str, Tensor], n: int, g: torch.Generator) -> Tensor:
    D = s["mean"].shape[0]
    z = torch.randn(n, D, generator=g, dtype=torch.float64)
    if kind == "covariance":
        return (z @ s["chol"].T).add_(s["mean"])
    if kind == "variance":
        return s["mean"] + z * s["std"]
    idx = torch.multinomial(s["weights"], n, replacement=True, generator=g)
    return s["centroids"][idx] + z * s["std"][idx]


def reference_sample(store: GaussianStore, class_ids, n: int, g: torch.Generator):
    """(rows, D) float32 and (rows,) int64, as the CPU-only code drew them."""
    if store.kind == "multi_centroid" and store.centroid_sampling == "per_centroid":
        feats, labels = [], []
        for c in class_ids:
            s = store.stats[int(c)]
            varied = (s["std"] ** 2 - store.ridge).mean(dim=1) > 1e-6 * max(store.ridge, 1e-12)
            for j in torch.nonzero(varied).flatten().tolist():
                z = torch.randn(n, s["centroids"].shape[1], generator=g, dtype=torch.float64)
                feats.append((s["centroids"][j] + z * s["std"][j]).float())
                labels.append(torch.full((n,), int(c), dtype=torch.int64))
        return torch.cat(feats), torch.cat(labels)
    feats = [reference_one(store.kind, store.stats[int(c)], n, g).float() for c in class_ids]
    return torch.cat(feats), torch.as_tensor(np.repeat(np.asarray(class_ids, dtype=np.int64), n))
# -----------------------------------------------------------------------------------------------------------


def fitted_store(kind: str, centroid_sampling: str, draw_dtype: str = "float64") -> GaussianStore:
    """Three classes of 40 correlated 6-D features each, fitted with a fixed seed."""
    g = torch.Generator().manual_seed(11)
    store = GaussianStore(kind, ridge=1e-4, n_centroids=3, seed=0, centroid_sampling=centroid_sampling,
                          draw_dtype=draw_dtype)
    for c in (4, 0, 9):
        A = torch.randn(6, 6, generator=g)
        store.add(c, torch.randn(6, generator=g) * 2 + torch.randn(40, 6, generator=g) @ A.T)
    return store


class MetaGenerator(torch.Generator):
    """A CPU generator that reports the meta device: sampling then takes the device path (shapes, no values)."""

    @property
    def device(self) -> torch.device:
        return torch.device("meta")


@pytest.mark.parametrize("kind,centroid_sampling", CASES)
def test_cpu_draws_are_bit_identical_to_the_cpu_only_code(kind, centroid_sampling):
    store = fitted_store(kind, centroid_sampling)
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    draws = draw_generator(ours, "cpu")
    assert draws is ours
    for n in (7, 32):  # two calls: the generator's state carries over exactly as before
        feats, labels = store.sample([9, 4, 0], n, draws)
        want, want_labels = reference_sample(store, [9, 4, 0], n, theirs)
        assert feats.dtype == torch.float32 and feats.device.type == "cpu"
        assert torch.equal(feats, want) and torch.equal(labels, want_labels)
    assert torch.equal(ours.get_state(), theirs.get_state())
    assert store._placed == {}  # the CPU float64 path draws from the stored statistics, no copy


def test_draw_generator_on_the_cpu_is_the_generator_itself_and_draws_nothing():
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    assert draw_generator(g, torch.device("cpu")) is g and draw_generator(g, "cpu") is g
    assert torch.equal(g.get_state(), state)


def test_draw_generator_elsewhere_is_a_device_generator_seeded_by_one_draw(monkeypatch):
    made = []
    monkeypatch.setattr(gaussian, "new_generator", lambda device: made.append(device) or torch.Generator())
    g, twin = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    first, second = draw_generator(g, "cuda"), draw_generator(g, torch.device("cuda", 1))
    assert made == [torch.device("cuda"), torch.device("cuda", 1)]
    seeds = [int(torch.randint(0, 2**63 - 1, (1,), generator=twin)) for _ in range(2)]
    assert [first.initial_seed(), second.initial_seed()] == seeds and seeds[0] != seeds[1]
    assert torch.equal(g.get_state(), twin.get_state())  # exactly one int64 of the CPU stream per call
    meta = MetaGenerator()
    assert draw_generator(meta, "meta") is meta  # already on the device: used as it is


@pytest.mark.parametrize("draw_dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind,centroid_sampling", CASES)
def test_device_path_moves_the_statistics_once(kind, centroid_sampling, draw_dtype):
    store = fitted_store(kind, centroid_sampling, draw_dtype)
    feats, labels = store.sample([9, 4], 5, MetaGenerator())
    rows = 10
    if centroid_sampling == "per_centroid":  # 5 from every cluster of nonzero variance
        rows = 5 * sum(int(((store.stats[c]["std"] ** 2 - 1e-4).mean(1) > 1e-10).sum()) for c in (9, 4))
    assert feats.device.type == "meta" and feats.dtype == torch.float32 and feats.shape == (rows, 6)
    assert labels.device.type == "cpu" and labels.shape == (rows,)
    copies = store._placed[("meta", gaussian.DRAW_DTYPES[draw_dtype])]
    assert sorted(copies) == [4, 9]
    assert all(t.device.type == "meta" and t.dtype == gaussian.DRAW_DTYPES[draw_dtype]
               for s in copies.values() for t in s.values())
    kept = copies[9]
    store.sample([9], 3, MetaGenerator())
    assert copies[9] is kept  # moved once, not per call
    store.add(9, torch.randn(12, 6, dtype=torch.float64))
    assert 9 not in copies and 4 in copies  # a refitted class is moved again on its next draw
    assert all(t.device.type == "cpu" and t.dtype == torch.float64 for t in store.stats[9].values())


@pytest.mark.parametrize("kind,centroid_sampling", CASES)
def test_float32_draws_on_the_cpu_keep_the_moments(kind, centroid_sampling):
    store, reference = fitted_store(kind, centroid_sampling, "float32"), fitted_store(kind, centroid_sampling)
    feats, labels = store.sample([4], 20000, torch.Generator().manual_seed(2))
    want, want_labels = reference.sample([4], 20000, torch.Generator().manual_seed(2))
    assert feats.dtype == torch.float32 and torch.equal(labels, want_labels)
    assert not torch.equal(feats, want)  # another stream: opting in changes the numbers, on the CPU too
    spread = want.std(0)
    assert torch.allclose(feats.mean(0), want.mean(0), atol=float(0.05 * spread.max()))
    assert torch.allclose(feats.std(0), spread, rtol=0.05)
    again = GaussianStore.from_state_dict(store.state_dict(), draw_dtype="float32")
    assert again.draw_dtype == "float32" and "draw_dtype" not in store.state_dict()
    with pytest.raises(ValueError, match="unknown draw dtype"):
        GaussianStore(kind, draw_dtype="bfloat16")


def test_align_head_draws_from_the_device_generator_and_shuffles_with_the_cpu_one(monkeypatch):
    store = fitted_store("variance", "by_weight")
    g, device_gen = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    calls, sampled = [], []
    monkeypatch.setattr(stages, "draw_generator", lambda gen, device: calls.append((gen, device)) or device_gen)
    original = store.sample
    monkeypatch.setattr(store, "sample", lambda *a: sampled.append(a[2]) or original(*a))
    head = torch.nn.Linear(6, 10)
    stages.align_head(head, store, [0, 4, 9], 10, epochs=2, lr=0.01, per_class=4, batch_size=6, generator=g,
                      device="cpu", stage="tap")
    assert calls == [(g, "cpu")]  # once per alignment stage
    assert sampled == [device_gen, device_gen]  # every epoch's draws
    assert not torch.equal(g.get_state(), torch.Generator().manual_seed(0).get_state())  # g shuffled
