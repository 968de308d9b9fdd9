"""L2P as a registered method (``method.name: l2p``): a shared prompt pool with learnable keys.

One pool of M prompts P_m (L, D) with keys k_m (D,), trained on every task (options in
:mod:`norga.methods.l2p_config`). For a sample x:

* query q(x) = the frozen backbone's class-token pre-logits (a forward without prompts);
* similarity s_m = cos(q(x), k_m); the sample's N prompts are its own top-N by s — **per sample**,
  never a vote over the batch (the official CIFAR configs select by a batch-wise majority vote,
  which makes a test sample's prediction depend on the other samples of its batch);
* the N·L prompt tokens are inserted after the class token at the input of block 0 (with the class
  token's position embedding under ``prompt_pos_embed: cls``), and the head reads the mean of
  their outputs (``head_pool: prompt_mean``) or the class token;
* training loss = CE over the current task's classes − ``pull_coeff`` · Σ_{selected m} s_m / B
  (the surrogate loss that pulls the selected keys towards the queries).

L2P infers no task id (``Prediction.task_ids = None``); with the true task given, the same logits
are restricted to that task's classes by the evaluation. ``selection_counts`` (per task, the number
of times each prompt was selected on the task's training images in its last epoch) shows whether
the selection collapsed onto a few prompts.
"""
from __future__ import annotations

from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..toolkit.feature_cache import FeatureCache
from ..toolkit.heads import init_linear_layers
from ..toolkit.seeding import named_generator
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from ..models.prompt_inputs import PromptInput
from . import register_method
from .base import Method, Prediction, TaskLoaders, TestBatch, batch_with_query, scaled_lr

INIT_STREAM = "l2p.init"  # the pool's and keys' initialisation: named_generator(seed, 0, INIT_STREAM)


def top_k_keys(query: Tensor, keys: Tensor, k: int) -> tuple:
    """Cosine similarity of queries (B, D) to keys (M, D) -> (similarity (B, M), indices of the top k (B, k)).

    Ties go to the lower key index (a stable descending sort)."""
    sim = F.normalize(query, dim=-1) @ F.normalize(keys, dim=-1).T
    return sim, sim.sort(dim=1, descending=True, stable=True).indices[:, :k]


def pull_loss(sim: Tensor, chosen: Tensor) -> Tensor:
    """Σ over the batch and the chosen keys of the similarity, divided by the batch size (a scalar)."""
    return sim.gather(1, chosen).sum() / len(sim)


def count_selected(counts: Tensor, chosen: Tensor) -> None:
    """Add each prompt's selections in ``chosen`` (B, N) to ``counts`` (M,), on their device without a host sync
    (a scatter-add: CUDA's bincount reads the largest id on the host)."""
    ids = chosen.flatten()
    counts.scatter_add_(0, ids, torch.ones_like(ids, dtype=counts.dtype))


@register_method("l2p")
class L2P(Method):
    """``prompts`` (M, L, D), ``keys`` (M, D) and the ``head`` (D -> C), all trained on every task."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = c = cfg.method
        self.model = self.frozen_token_model(vit)
        width, dim = self.model.spec.embed_dim, self.model.embed_dim
        g = named_generator(cfg.seed, 0, INIT_STREAM)
        uniform = lambda *shape: (2 * torch.rand(*shape, generator=g) - 1).to(device)  # noqa: E731
        self.prompts = nn.Parameter(uniform(c.pool_size, c.prompt_length, width))
        self.keys = nn.Parameter(uniform(c.pool_size, dim))
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), c.head_init).to(device)
        pos = getattr(vit, "pos_embed", None)
        use_cls_pos = c.prompt_pos_embed == "cls" and pos is not None and not getattr(vit, "no_embed_class", False)
        self.prompt_pos = pos[0, 0].detach().clone() if use_cls_pos else torch.zeros(width, device=device)
        self.selection_counts: Dict[int, list] = {}

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    # ---- the prompted forward ------------------------------------------
    def tokens(self, chosen: Tensor) -> PromptInput:
        """Chosen prompt ids (B, N) -> the forward's prompt tokens (B, N·L, D), per sample."""
        tokens = self.prompts[chosen].flatten(1, 2) + self.prompt_pos
        return PromptInput(tokens=tokens, pool="prompt_mean" if self.c.head_pool == "prompt_mean" else "token")

    def forward_selected(self, x: Tensor, query: Tensor) -> tuple:
        """Images (B, 3, H, W) and their frozen queries (B, D) -> (logits (B, C), similarity (B, M), chosen (B, N))."""
        sim, chosen = top_k_keys(query, self.keys, self.c.top_k)
        return self.head(self.model(x, self.tokens(chosen))), sim, chosen

    # ---- learning -------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c, model, device = self.c, self.model, self.device
        params = [self.prompts, self.keys, *self.head.parameters()]
        lr = scaled_lr(c.lr, c.batch_size, c.scale_lr_by_batch)
        optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), weight_decay=0.0)  # new per task
        counts = torch.zeros(c.pool_size, dtype=torch.long, device=device)  # on the device: read once per task
        model.eval()  # the backbone is frozen; its dropout-free eval mode throughout

        def forward(batch):
            x, y, query = batch_with_query(model, batch, device)
            logits, sim, chosen = self.forward_selected(x, query)
            count_selected(counts, chosen)
            return {"logits": logits, "labels": y, "similarity": sim, "chosen": chosen}

        def batches(epoch):
            counts.zero_()  # keep the last epoch's counts
            return loaders.train

        run_stage(Stage("l2p", task, c.epochs, optimizer, clip=c.grad_clip, clip_params=params,
                        train_modules=[self.head], lr_key=self.config_key("lr")),
                  batches=batches, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task)),
                         "pull": lambda out: -c.pull_coeff * pull_loss(out["similarity"], out["chosen"])})
        self.head.eval()
        self.selection_counts[task] = counts.tolist()

    # ---- prediction -----------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """Frozen queries come from the cache; prompted features are recomputed (the pool changes every task)."""
        query = self.frozen_query(batch, cache)
        logits, _, _ = self.forward_selected(batch.images, query)
        return Prediction(logits, logits)

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"prompts": self.prompts.detach().cpu(), "keys": self.keys.detach().cpu(),
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()},
                "selection_counts": {int(t): list(v) for t, v in self.selection_counts.items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        with torch.no_grad():
            self.prompts.copy_(state["prompts"].to(self.device))
            self.keys.copy_(state["keys"].to(self.device))
        self.head.load_state_dict(state["head"])
        self.selection_counts = {int(t): list(v) for t, v in state["selection_counts"].items()}

    def describe(self) -> Dict[str, Any]:
        c = self.c
        used = [sum(1 for n in counts if n > 0) for _, counts in sorted(self.selection_counts.items())]
        return {"name": self.name, "pool_size": c.pool_size, "prompt_length": c.prompt_length, "top_k": c.top_k,
                "selection_counts": {str(t): v for t, v in sorted(self.selection_counts.items())},
                "prompts_used_per_task": used}

    def summary(self) -> str:
        c = self.c
        return (f"method: l2p (pool of {c.pool_size} prompts x {c.prompt_length} tokens with keys; top-{c.top_k} "
                f"per sample by cosine to the frozen class token; head on {c.head_pool}; pull coeff {c.pull_coeff})")
