"""Per-class feature statistics and pseudo-feature sampling (TII / TAP alignment).

Three storage kinds, chosen by ``StatsConfig.kind`` (D = feature dim, per class):

* ``covariance``     — mean + full covariance (+ ridge * I, default 1e-4 as the
  authors' code); memory D + D^2 floats (ViT-B, D=768: 2.4 MB fp32 per class,
  0.47 GB for 200 classes). Sampling: N(mu, Sigma + ridge I) via Cholesky.
* ``variance``       — mean + per-dimension variance (+ ridge); 2D floats
  (6 KB per class at D=768). Sampling: N(mu, diag(var + ridge)).
* ``multi_centroid`` — k-means (scikit-learn, fixed seed) with k = n_centroids
  clusters per class, each with its weight, centroid and per-dimension
  variance (+ ridge); k(2D + 1) floats. Sampling (``centroid_sampling``):
  ``by_weight`` picks a cluster by its weight for each of the class's samples,
  then N(centroid, diag(var + ridge)); ``per_centroid`` (the HiDe codes'
  ``train_task_adaptive_prediction``) draws that many samples from every
  cluster whose variance is not all zero (single-member clusters are skipped),
  so a class yields (its such clusters) x per_class rows.

Statistics are stored in float64 for a stable Cholesky and sampled as float32.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor


class GaussianStore:
    """Statistics for each class id seen so far; ``add`` then ``sample``."""

    KINDS = ("covariance", "variance", "multi_centroid")
    CENTROID_SAMPLING = ("by_weight", "per_centroid")

    def __init__(self, kind: str = "covariance", ridge: float = 1e-4, n_centroids: int = 10, seed: int = 0,
                 centroid_sampling: str = "by_weight"):
        if kind not in self.KINDS:
            raise ValueError(f"unknown statistics kind {kind!r}; choose one of {self.KINDS}")
        if centroid_sampling not in self.CENTROID_SAMPLING:
            raise ValueError(f"unknown centroid sampling {centroid_sampling!r}; choose one of {self.CENTROID_SAMPLING}")
        self.kind, self.ridge, self.n_centroids, self.seed = kind, float(ridge), int(n_centroids), int(seed)
        self.centroid_sampling = centroid_sampling
        self.stats: Dict[int, Dict[str, Tensor]] = {}

    def __contains__(self, class_id: int) -> bool:
        return int(class_id) in self.stats

    @property
    def classes(self) -> List[int]:
        return sorted(self.stats)

    def add(self, class_id: int, features: Tensor) -> None:
        """Store statistics of one class from its features (n, D), n >= 2."""
        feats = features.detach().to("cpu", torch.float64)
        if feats.dim() != 2 or feats.shape[0] < 2:
            raise ValueError(f"class {class_id}: need features of shape (n >= 2, D), got {tuple(feats.shape)}")
        getattr(self, f"_fit_{self.kind}")(int(class_id), feats)

    def _fit_covariance(self, c: int, x: Tensor) -> None:
        cov = torch.cov(x.T) + self.ridge * torch.eye(x.shape[1], dtype=x.dtype)
        self.stats[c] = {"mean": x.mean(0), "chol": torch.linalg.cholesky(cov)}

    def _fit_variance(self, c: int, x: Tensor) -> None:
        self.stats[c] = {"mean": x.mean(0), "std": (x.var(0) + self.ridge).sqrt()}

    def _fit_multi_centroid(self, c: int, x: Tensor) -> None:
        from sklearn.cluster import KMeans  # here: scikit-learn (with SciPy) costs seconds of start-up otherwise

        k = min(self.n_centroids, x.shape[0])
        km = KMeans(n_clusters=k, n_init=3, random_state=self.seed).fit(x.numpy())
        labels = torch.as_tensor(km.labels_)
        centroids = torch.as_tensor(km.cluster_centers_, dtype=x.dtype)
        var = torch.stack([
            x[labels == j].var(0, unbiased=False) if (labels == j).sum() > 1 else torch.zeros(x.shape[1], dtype=x.dtype)
            for j in range(k)
        ])
        weights = torch.bincount(labels, minlength=k).to(x.dtype) / x.shape[0]
        self.stats[c] = {"mean": x.mean(0), "centroids": centroids, "std": (var + self.ridge).sqrt(),
                         "weights": weights}

    def means(self, class_ids: Sequence[int]) -> Tensor:
        """Class means (len(class_ids), D), float32 (contrastive prototypes)."""
        return torch.stack([self.stats[int(c)]["mean"] for c in class_ids]).float()

    def sample(self, class_ids: Sequence[int], per_class: int, generator: torch.Generator) -> Tuple[Tensor, Tensor]:
        """``per_class`` pseudo-features for every class: (len*per_class, D) float32, labels (len*per_class,)."""
        missing = [c for c in class_ids if int(c) not in self.stats]
        if missing:
            raise KeyError(f"no statistics stored for classes {missing}")
        if self.kind == "multi_centroid" and self.centroid_sampling == "per_centroid":
            return self._sample_per_centroid(class_ids, per_class, generator)
        # float32 per class, then one concatenation: the same values as concatenating in float64 first, half the copy
        feats = [self._sample_one(self.stats[int(c)], per_class, generator).float() for c in class_ids]
        labels = torch.as_tensor(np.repeat(np.asarray(class_ids, dtype=np.int64), per_class))
        return torch.cat(feats), labels

    def _sample_per_centroid(self, class_ids: Sequence[int], n: int, g: torch.Generator) -> Tuple[Tensor, Tensor]:
        """``n`` pseudo-features from every cluster of nonzero variance of every class, class by class, cluster by
        cluster: (rows, D) float32 and labels (rows,)."""
        feats, labels = [], []
        for c in class_ids:
            s = self.stats[int(c)]
            varied = (s["std"] ** 2 - self.ridge).mean(dim=1) > 1e-6 * max(self.ridge, 1e-12)
            for j in torch.nonzero(varied).flatten().tolist():
                z = torch.randn(n, s["centroids"].shape[1], generator=g, dtype=torch.float64)
                feats.append((s["centroids"][j] + z * s["std"][j]).float())
                labels.append(torch.full((n,), int(c), dtype=torch.int64))
        if not feats:
            raise ValueError(f"classes {list(class_ids)} have no cluster with nonzero variance to sample from "
                             "(every cluster has one member): lower stats.n_centroids or use centroid_sampling "
                             "by_weight")
        return torch.cat(feats), torch.cat(labels)

    def _sample_one(self, s: Dict[str, Tensor], n: int, g: torch.Generator) -> Tensor:
        D = s["mean"].shape[0]
        z = torch.randn(n, D, generator=g, dtype=torch.float64)
        if self.kind == "covariance":
            return (z @ s["chol"].T).add_(s["mean"])  # = mean + z L^T exactly (addition commutes), one buffer fewer
        if self.kind == "variance":
            return s["mean"] + z * s["std"]
        idx = torch.multinomial(s["weights"], n, replacement=True, generator=g)
        return s["centroids"][idx] + z * s["std"][idx]

    def state_dict(self) -> dict:
        return {"kind": self.kind, "ridge": self.ridge, "n_centroids": self.n_centroids, "seed": self.seed,
                "centroid_sampling": self.centroid_sampling, "stats": self.stats}

    @classmethod
    def from_state_dict(cls, state: dict) -> "GaussianStore":
        store = cls(state["kind"], state["ridge"], state["n_centroids"], state["seed"],
                    state.get("centroid_sampling", "by_weight"))
        store.stats = {int(k): v for k, v in state["stats"].items()}
        return store
