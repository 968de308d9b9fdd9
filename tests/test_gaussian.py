"""Gaussian statistics: each storage kind reproduces the class distribution it was fitted on."""
from __future__ import annotations

import pytest
import torch

from norga.toolkit.gaussian import GaussianStore
from norga.toolkit.stages import contrastive_regulariser
from norga.toolkit.training import masked_cross_entropy


def class_features(seed: int, n: int = 4000, D: int = 4):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(D, D, generator=g)
    mean = torch.randn(D, generator=g) * 3
    return mean + torch.randn(n, D, generator=g) @ A.T, mean, A @ A.T


@pytest.mark.parametrize("kind", GaussianStore.KINDS)
def test_samples_match_the_fitted_moments(kind):
    x, mean, cov = class_features(0)
    store = GaussianStore(kind, ridge=1e-4, n_centroids=5, seed=0)
    store.add(7, x)
    samples, labels = store.sample([7], 20000, torch.Generator().manual_seed(1))
    assert samples.shape == (20000, 4) and labels.unique().tolist() == [7]
    assert torch.allclose(samples.mean(0), x.mean(0), atol=0.15)
    emp_var = x.var(0)
    assert torch.allclose(samples.var(0), emp_var, rtol=0.1)
    if kind == "covariance":  # full covariance keeps the correlations
        assert torch.allclose(torch.cov(samples.T), torch.cov(x.T), atol=0.1 * emp_var.max())
    assert torch.equal(store.means([7]), x.double().mean(0).float()[None])


def test_per_centroid_sampling_by_hand():
    """Class 3: points 0, 0 | 10, 12 | 100 (1-D, three well-separated clusters, k = 3). The cluster {100} has one
    member (variance 0) and is skipped; {0, 0} also has variance 0 and is skipped; {10, 12} (centroid 11, variance
    1) gives all n samples: N(11, 1 + ridge). Class 5 (0, 2 | 50, 54 | 200) has two varied clusters: 2 n rows, n
    from each, centred on 1 and 52."""
    store = GaussianStore("multi_centroid", ridge=1e-4, n_centroids=3, seed=0, centroid_sampling="per_centroid")
    store.add(3, torch.tensor([[0.0], [0.0], [10.0], [12.0], [100.0]]))
    store.add(5, torch.tensor([[0.0], [2.0], [50.0], [54.0], [200.0]]))
    feats, labels = store.sample([3, 5], 4000, torch.Generator().manual_seed(0))
    assert labels.tolist() == [3] * 4000 + [5] * 8000
    ours = feats[:4000, 0]
    assert abs(float(ours.mean()) - 11.0) < 0.1 and abs(float(ours.var()) - (1.0 + 1e-4)) < 0.1
    fives = sorted([float(feats[4000:8000, 0].mean()), float(feats[8000:, 0].mean())])
    assert fives == pytest.approx([1.0, 52.0], abs=0.15)
    again = GaussianStore.from_state_dict(store.state_dict())
    assert again.centroid_sampling == "per_centroid"
    lone = GaussianStore("multi_centroid", n_centroids=2, centroid_sampling="per_centroid")
    lone.add(1, torch.tensor([[0.0], [9.0]]))
    with pytest.raises(ValueError, match="no cluster with nonzero variance"):
        lone.sample([1], 3, torch.Generator())
    with pytest.raises(ValueError, match="unknown centroid sampling"):
        GaussianStore("multi_centroid", centroid_sampling="uniform")


def test_state_round_trip_and_errors():
    store = GaussianStore("variance")
    store.add(1, torch.randn(10, 3))
    again = GaussianStore.from_state_dict(store.state_dict())
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(store.sample([1], 5, g1)[0], again.sample([1], 5, g2)[0])
    with pytest.raises(KeyError, match=r"no statistics stored for classes \[2\]"):
        store.sample([2], 1, g1)
    with pytest.raises(ValueError, match="need features of shape"):
        store.add(3, torch.randn(1, 3))
    with pytest.raises(ValueError, match="unknown statistics kind"):
        GaussianStore("full")


def test_masked_cross_entropy_equals_ce_over_allowed_columns():
    logits = torch.randn(5, 6)
    allowed = torch.tensor([False, True, True, False, True, False])
    labels = torch.tensor([1, 2, 4, 4, 1])
    expected = torch.nn.functional.cross_entropy(logits[:, [1, 2, 4]], torch.tensor([0, 1, 2, 2, 0]),
                                                 label_smoothing=0.1)
    assert torch.allclose(masked_cross_entropy(logits, labels, allowed, 0.1), expected)


def test_contrastive_regulariser_matches_eq56_by_hand():
    h = torch.nn.functional.normalize(torch.randn(3, 4), dim=-1)
    mu = torch.nn.functional.normalize(torch.randn(2, 4), dim=-1)
    T = 0.8
    total = 0.0
    for i in range(3):
        denom = sum(torch.exp(h[i] @ h[j] / T) for j in range(3)) + sum(torch.exp(h[i] @ mu[c] / T) for c in range(2))
        total += sum(torch.log(torch.exp(h[i] @ mu[c] / T) / denom) for c in range(2))
    assert torch.allclose(contrastive_regulariser(h * 5, mu * 2, T), total / 6, atol=1e-6)
