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

Statistics are stored in float64 on the CPU for a stable Cholesky and sampled as float32.

Where the draws happen (issue #68): ``sample`` draws on its generator's device. Give it the run's CPU
generator and everything is exactly as it always was (CPU, float64 normals, then float32). For a run on
a GPU, :func:`draw_generator` turns the run's CPU generator into a generator on the GPU, seeded by one
draw of the CPU one; the store then copies each class's statistics to that device once (kept until the
class is refitted; a float64 covariance store of 200 ViT-B classes takes 0.94 GB of GPU memory, half of
that with ``draw_dtype="float32"``) and the features come back on the device. ``draw_dtype`` (default
``"float64"``, today's draws) can be ``"float32"``: normals and statistics in float32, several times
faster on most GPUs (few have fast float64), rounding at 1e-7 relative instead of 1e-16 before the
features are cast to float32 anyway; it changes the numbers on every device, the CPU included.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

DRAW_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def new_generator(device: torch.device) -> torch.Generator:
    """An unseeded generator on ``device`` (a function of its own so tests can stand in for a CUDA one)."""
    return torch.Generator(device=device)


def draw_generator(generator: torch.Generator, device) -> torch.Generator:
    """The generator that :meth:`GaussianStore.sample` draws from on ``device`` (str or torch.device).

    ``generator`` itself, untouched, when it already lives on ``device`` — the CPU case: a CPU run's numbers
    are bit for bit those of the CPU-only code. Otherwise a new generator on ``device`` seeded with one
    integer in [0, 2**63 - 1) drawn from ``generator`` (one int64 of its stream). Callers derive it once per
    alignment stage (one task's TII alignment, TAP, ...), so each stage's device stream is fixed by
    (seed, task, stage) and a resumed run draws what an uninterrupted one does.
    """
    device = torch.device(device)
    if generator.device.type == device.type and (device.index is None or generator.device.index == device.index):
        return generator
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=generator.device))
    return new_generator(device).manual_seed(seed)


class GaussianStore:
    """Statistics for each class id seen so far; ``add`` then ``sample``."""

    KINDS = ("covariance", "variance", "multi_centroid")
    CENTROID_SAMPLING = ("by_weight", "per_centroid")

    def __init__(self, kind: str = "covariance", ridge: float = 1e-4, n_centroids: int = 10, seed: int = 0,
                 centroid_sampling: str = "by_weight", draw_dtype: str = "float64"):
        if kind not in self.KINDS:
            raise ValueError(f"unknown statistics kind {kind!r}; choose one of {self.KINDS}")
        if centroid_sampling not in self.CENTROID_SAMPLING:
            raise ValueError(f"unknown centroid sampling {centroid_sampling!r}; choose one of {self.CENTROID_SAMPLING}")
        self.kind, self.ridge, self.n_centroids, self.seed = kind, float(ridge), int(n_centroids), int(seed)
        if draw_dtype not in DRAW_DTYPES:
            raise ValueError(f"unknown draw dtype {draw_dtype!r}; choose one of {tuple(DRAW_DTYPES)}")
        self.centroid_sampling, self.draw_dtype = centroid_sampling, draw_dtype
        self.stats: Dict[int, Dict[str, Tensor]] = {}  # float64 on the CPU: what is fitted and saved
        self._placed: Dict[Tuple[str, torch.dtype], Dict[int, Dict[str, Tensor]]] = {}  # copies to draw from

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
        for copies in self._placed.values():
            copies.pop(int(class_id), None)

    def _placed_stats(self, c: int, device: torch.device) -> Dict[str, Tensor]:
        """Class ``c``'s statistics on ``device`` in ``draw_dtype``: the stored float64 CPU tensors themselves
        for (CPU, float64), else copies made on first use and kept (``add`` drops a refitted class's)."""
        dtype = DRAW_DTYPES[self.draw_dtype]
        if device.type == "cpu" and dtype == torch.float64:
            return self.stats[c]
        copies = self._placed.setdefault((str(device), dtype), {})
        if c not in copies:
            copies[c] = {k: v.to(device, dtype) for k, v in self.stats[c].items()}
        return copies[c]

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
        """``per_class`` pseudo-features for every class: (len*per_class, D) float32 on ``generator.device``,
        labels (len*per_class,) int64 on the CPU. Draws on the generator's device in ``draw_dtype``; the run's
        CPU generator gives today's CPU numbers, :func:`draw_generator` gives one on the run's device."""
        missing = [c for c in class_ids if int(c) not in self.stats]
        if missing:
            raise KeyError(f"no statistics stored for classes {missing}")
        if self.kind == "multi_centroid" and self.centroid_sampling == "per_centroid":
            return self._sample_per_centroid(class_ids, per_class, generator)
        # float32 per class, then one concatenation: the same values as concatenating in float64 first, half the copy
        device = generator.device
        feats = [self._sample_one(self._placed_stats(int(c), device), per_class, generator).float() for c in class_ids]
        labels = torch.as_tensor(np.repeat(np.asarray(class_ids, dtype=np.int64), per_class))
        return torch.cat(feats), labels

    def _sample_per_centroid(self, class_ids: Sequence[int], n: int, g: torch.Generator) -> Tuple[Tensor, Tensor]:
        """``n`` pseudo-features from every cluster of nonzero variance of every class, class by class, cluster by
        cluster: (rows, D) float32 on ``g.device`` and labels (rows,) on the CPU. Which clusters vary is read from
        the stored float64 statistics whatever the device and draw dtype."""
        feats, labels = [], []
        for c in class_ids:
            std = self.stats[int(c)]["std"]
            varied = (std ** 2 - self.ridge).mean(dim=1) > 1e-6 * max(self.ridge, 1e-12)
            s = self._placed_stats(int(c), g.device)
            for j in torch.nonzero(varied).flatten().tolist():
                z = torch.randn(n, s["centroids"].shape[1], generator=g, dtype=s["std"].dtype, device=s["std"].device)
                feats.append((s["centroids"][j] + z * s["std"][j]).float())
                labels.append(torch.full((n,), int(c), dtype=torch.int64))
        if not feats:
            raise ValueError(f"classes {list(class_ids)} have no cluster with nonzero variance to sample from "
                             "(every cluster has one member): lower stats.n_centroids or use centroid_sampling "
                             "by_weight")
        return torch.cat(feats), torch.cat(labels)

    def _sample_one(self, s: Dict[str, Tensor], n: int, g: torch.Generator) -> Tensor:
        """(n, D) draws of one class from its statistics ``s`` (all on g's device, one dtype), in that dtype."""
        D = s["mean"].shape[0]
        z = torch.randn(n, D, generator=g, dtype=s["mean"].dtype, device=s["mean"].device)
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
    def from_state_dict(cls, state: dict, draw_dtype: str = "float64") -> "GaussianStore":
        """The store saved by ``state_dict``; ``draw_dtype`` is a run-time choice (like the device), not saved."""
        store = cls(state["kind"], state["ridge"], state["n_centroids"], state["seed"],
                    state.get("centroid_sampling", "by_weight"), draw_dtype)
        store.stats = {int(k): v for k, v in state["stats"].items()}
        return store
