"""S-Prompts with one common head (``method.name: sprompt``): a prompt per task, task chosen by K-means centroids.

Learning task t (Wang et al. 2022, adapted to class-incremental learning as in the NoRGa paper's
Appendix D; options in :mod:`norga.methods.sprompt_config`):

1. the frozen backbone's class-token features q(x) of the task's un-augmented training images,
   L2-normalised (``normalize_query``), are clustered by scikit-learn's ``KMeans`` into K
   centroids C_t (K, D);
2. the task's prompt P_t (L, D) — L tokens inserted after the class token at the input of block 0,
   after the position embedding (they get none), as the official SiNet does — and the common
   head ψ (D -> C classes) are trained with cross-entropy over task t's classes only, on augmented
   images. P_t is the only prompt given to the optimiser: earlier prompts never change.

Predicting a sample x (it depends on x alone): d_k = min_j dist(q(x), C_k[j]) over the learned tasks
k, with dist = L1 (official) or L2; t̂ = argmin_k d_k; logits = ψ(f(x; P_t̂)) over the classes of task t̂
(``classify_within: selected_task``, as the official code's per-task classifier; ``seen_classes``: over all
classes, the evaluation masks unseen ones). With the true task t given: ψ(f(x; P_t)) over t's classes.
The head is only ever trained with CE within one task, so across tasks its logits are not comparable:
letting all seen classes compete collapses class-incremental accuracy (bench: FA 1% with TII 85%).
"""
from __future__ import annotations

import math
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..toolkit.feature_cache import FeatureCache, prompted_features
from ..toolkit.heads import init_linear_layers, masked_logits
from ..toolkit.optimizers import make_optimizer
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import task_generator, task_seed
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from ..config import ConfigError
from ..models.prompt_inputs import PromptInput
from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch

PROMPT_INIT_STAGE = 1  # generator id of task_generator(seed, task, stage)


def nearest_centroid_task(query: Tensor, centroids: Tensor, distance: str) -> Tensor:
    """Task of each query's nearest centroid: query (B, D), centroids (T, K, D) -> (B,) long in [0, T).

    ``l1``: Σ_i |q_i − c_i|; ``l2``: ‖q − c‖₂. Ties go to the lower task index.
    """
    diff = query[:, None, None, :] - centroids[None]  # (B, T, K, D)
    dist = diff.abs().sum(-1) if distance == "l1" else diff.pow(2).sum(-1)  # squares keep the L2 order
    return dist.min(dim=2).values.argmin(dim=1)


@register_method("sprompt")
class SPrompt(Method):
    """``prompts`` (T, L, D) token prompts; ``centroids`` (T, K, D_f) per-task K-means centroids of frozen
    queries; ``learned``: number of tasks learned; ``head``: the common linear head (D_f -> C)."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = c = cfg.method
        self.model = self.frozen_token_model(vit)
        width, dim = self.model.spec.embed_dim, self.model.embed_dim
        self.prompts = torch.zeros(self.num_tasks, c.prompt_length, width, device=device)
        self.centroids = torch.zeros(self.num_tasks, c.centroids_per_task, dim, device=device)
        self.learned = 0
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), c.head_init).to(device)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    # ---- learning -------------------------------------------------------
    def query(self, frozen: Tensor) -> Tensor:
        """Frozen class-token features (N, D) -> the selection query (L2-normalised unless switched off)."""
        return F.normalize(frozen, dim=-1) if self.c.normalize_query else frozen

    def tokens(self, prompt: Tensor) -> PromptInput:
        """A (L, D) prompt as the forward's prompt tokens, shared by the batch."""
        return PromptInput(tokens=prompt.unsqueeze(0))

    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        frozen, _ = self.frozen_pass(self.model, loaders.train_plain)
        self.centroids[task] = self._kmeans(self.query(frozen), task).to(self.device)
        self._train_prompt(task, loaders)
        self.learned = task + 1

    def _kmeans(self, queries: Tensor, task: int) -> Tensor:
        from sklearn.cluster import KMeans

        k = self.c.centroids_per_task
        if len(queries) < k:
            raise ConfigError(f"task {task} has {len(queries)} training images, fewer than "
                              f"method.centroids_per_task={k}; lower it")
        fit = KMeans(n_clusters=k, n_init=10, random_state=task_seed(self.cfg.seed, task) % 2**31)
        return torch.as_tensor(fit.fit(queries.double().numpy()).cluster_centers_, dtype=torch.float32)

    def _initial_prompt(self, task: int) -> Tensor:
        if self.c.prompt_init == "previous" and task > 0:
            return self.prompts[task - 1].clone()
        bound = 1.0 / math.sqrt(self.prompts.shape[-1])  # nn.Linear(D, L).weight's default init
        noise = torch.rand(self.prompts.shape[1:], generator=task_generator(self.cfg.seed, task, PROMPT_INIT_STAGE))
        return ((2 * noise - 1) * bound).to(self.device)

    def _train_prompt(self, task: int, loaders: TaskLoaders) -> None:
        c, model, head = self.c, self.model, self.head
        prompt = nn.Parameter(self._initial_prompt(task))
        params = [prompt, *head.parameters()]
        optimizer = make_optimizer(c.optimizer, params, c.lr, c.weight_decay, momentum=0.9)
        scheduler = epoch_scheduler(optimizer, c.schedule, c.epochs)
        model.eval()  # frozen backbone in eval mode throughout (official: the network trains in eval())

        def forward(batch):
            x, y = batch
            feats = model(x.to(self.device), self.tokens(prompt))
            return {"logits": head(feats), "labels": y.to(self.device)}

        run_stage(Stage("sprompt", task, c.epochs, optimizer, scheduler, train_modules=[head],
                        lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task))})
        head.eval()
        self.prompts[task] = prompt.detach()

    # ---- prediction -----------------------------------------------------
    def select_tasks(self, frozen: Tensor) -> Tensor:
        """Frozen features (B, D) -> inferred task per sample (B,), among the learned tasks."""
        return nearest_centroid_task(self.query(frozen), self.centroids[:max(self.learned, 1)], self.c.distance)

    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """Frozen features and (sample, prompt k) features come from the cache: they never change once task k
        is learned."""
        x, task, index, n = batch.images, batch.task, batch.index, batch.size
        frozen = self.frozen_query(batch, cache)
        tasks = self.select_tasks(frozen)
        prompt_of = lambda k, m: self.tokens(self.prompts[k])  # noqa: E731 - broadcast over the m samples
        feats = prompted_features(self.model, x, index, tasks, prompt_of, cache, task, n).to(self.device)
        true_feats = prompted_features(self.model, x, index, torch.full_like(tasks, task), prompt_of, cache, task,
                                       n).to(self.device)
        logits = self.head(feats)
        if self.c.classify_within == "selected_task":  # the selected task's classes only (official S-Prompts)
            logits = masked_logits(logits, self.class_to_task.to(self.device)[None] == tasks[:, None])
        return Prediction(logits, self.head(true_feats), tasks)

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"prompts": self.prompts.cpu(), "centroids": self.centroids.cpu(), "learned": self.learned,
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        self.prompts.copy_(state["prompts"].to(self.device))
        self.centroids.copy_(state["centroids"].to(self.device))
        self.learned = int(state["learned"])
        self.head.load_state_dict(state["head"])

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "prompt_length": c.prompt_length, "centroids_per_task": c.centroids_per_task,
                "distance": c.distance, "prompt_norms": [float(self.prompts[t].norm()) for t in range(self.learned)]}

    def summary(self) -> str:
        c = self.c
        return (f"method: sprompt ({c.prompt_length} prompt tokens per task at block 0; task = nearest of "
                f"{c.centroids_per_task} K-means centroids per task, {c.distance} distance; one common head)")
