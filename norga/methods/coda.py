"""CODA-Prompt as a registered method (``method.name: coda``), its prefixes through the gate registry.

Per prompted block (options in :mod:`norga.methods.coda_config`): a pool of M components P_m (L, W), keys
K_m (D,) and attention vectors A_m (D,); task t owns the n = M // T components [t n, (t + 1) n). For a
sample with frozen query q (the backbone's class-token pre-logits, a forward without prompts):

    alpha_m = cos(q ⊙ A_m, K_m)          (no softmax, no renormalisation — as the official code)
    prompt  = Σ_m alpha_m P_m            (L, W): rows [0, L/2) are prefix keys, [L/2, L) prefix values,
                                          split into H heads of Dh = W / H (official: after W_k, W_v)

over the components of the tasks learned so far (test) or up to the current task (training, earlier ones
detached: only the current task's components, keys and attention vectors train). Each task's new
components, keys and attention vectors start orthonormal to each other and to all earlier ones
(``init: gram_schmidt``); loss = CE over the task's classes + ``ortho_mu`` · Σ_blocks [o(K) + o(A) + o(P)],
o(X) = mean((X Xᵀ − I)²) over the components in use. CODA infers no task id; every sample's prompt
depends on that sample only.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from ..toolkit.feature_cache import FeatureCache
from ..toolkit.heads import init_linear_layers
from ..toolkit.schedules import epoch_scheduler
from ..toolkit.seeding import named_generator
from ..toolkit.training import Stage, cross_entropy_term, run_stage
from ..models.prompt_inputs import PromptInput
from . import register_method
from .base import Prediction, PrefixMethod, TaskLoaders, TestBatch, batch_with_query, check_blocks

INIT_STREAM = "coda.init"  # task t's new components: named_generator(seed, t, INIT_STREAM)
POOLS = ("components", "keys", "attention")


def component_weights(query: Tensor, keys: Tensor, attention: Tensor) -> Tensor:
    """alpha (B, n) = cos(q_b ⊙ A_m, K_m) for queries (B, D), keys (n, D) and attention vectors (n, D)."""
    attended = F.normalize(query[:, None, :] * attention[None], dim=-1)  # (B, n, D)
    return torch.einsum("bnd,nd->bn", attended, F.normalize(keys, dim=-1))


def orthonormal_rows(old: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """n unit rows (n, d), orthogonal to each other and to the span of the rows of ``old`` (s, d).

    Gaussian draws, projected out of span(old) twice (once is not enough in floating point), then
    orthonormalised by a QR decomposition."""
    d = old.shape[1]
    v = torch.randn(n, d, generator=generator, dtype=torch.float64)
    if len(old):
        basis = torch.linalg.qr(old.detach().cpu().double().T).Q  # (d, s): orthonormal basis of span(old)
        for _ in range(2):
            v = v - (v @ basis) @ basis.T
    return torch.linalg.qr(v.T).Q.T.float()


def ortho_penalty(rows: Tensor) -> Tensor:
    """mean((X Xᵀ − I)²) for X = rows (n, d): 0 iff the rows are orthonormal."""
    gram = rows @ rows.T
    return (gram - torch.eye(len(rows), device=rows.device)).pow(2).mean()


def max_cross_task_cosine(rows: Tensor, per_task: int) -> float:
    """Largest |cos| between rows (f, d) of different tasks (tasks own consecutive blocks of ``per_task``)."""
    unit = F.normalize(rows, dim=-1)
    task = torch.arange(len(rows), device=rows.device) // per_task
    cross = (unit @ unit.T).abs().masked_fill(task[:, None] == task[None], 0.0)
    return float(cross.max()) if len(rows) else 0.0


@register_method("coda")
class CODAPrompt(PrefixMethod):
    """``components`` (P, M, L, W), ``keys`` and ``attention`` (P, M, D) for the P prompted blocks; ``head``."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = c = cfg.method
        check_blocks(vit, {"method.prompt_layers": c.prompt_layers})
        self.layers = list(c.prompt_layers)
        self.model = self.gated_prefix_model(vit, self.layers)
        width, dim = self.model.spec.embed_dim, self.model.embed_dim
        self.per_task = c.pool_size // self.num_tasks
        self._check_pool(width, dim)
        shape = (len(self.layers), c.pool_size)
        self.pools = {"components": torch.zeros(*shape, c.prompt_length, width, device=device),
                      "keys": torch.zeros(*shape, dim, device=device),
                      "attention": torch.zeros(*shape, dim, device=device)}
        if c.init == "orthogonal":  # the paper: all M orthogonal once, never re-drawn
            self.draw_orthonormal(0, c.pool_size, named_generator(cfg.seed, 0, INIT_STREAM))
        self.learned = 0
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), c.head_init).to(device)

    def _check_pool(self, width: int, dim: int) -> None:
        c = self.c
        if self.per_task < 1:
            raise ConfigError(f"method.pool_size={c.pool_size} gives no component to each of the {self.num_tasks} "
                              f"tasks; set method.pool_size >= {self.num_tasks}")
        room = min(dim, c.prompt_length * width)
        if self.per_task * self.num_tasks > room:
            raise ConfigError(f"method.pool_size={c.pool_size}: {self.per_task * self.num_tasks} mutually orthogonal "
                              f"components, keys and attention vectors need dimension >= that, this backbone gives "
                              f"{room}; set method.pool_size <= {room}")

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def draw_orthonormal(self, start: int, end: int, generator: torch.Generator) -> None:
        """Rows [start, end) of every pool of every block (components (M, L, W), keys and attention vectors (M, D)):
        orthonormal to each other and to rows [0, start), drawn from ``generator``. The draw a new task's rows get;
        public so that a check can draw a task's rows with its own generator (docs/architecture.md, hook points)."""
        for name, pool in self.pools.items():
            for p in range(len(self.layers)):
                rows = pool[p].flatten(1)  # components: (M, L W)
                new = orthonormal_rows(rows[:start], end - start, generator).to(self.device)
                pool[p, start:end] = new.view_as(pool[p, start:end])

    # ---- the prompted forward ------------------------------------------
    def prompts(self, query: Tensor, components: Tensor, keys: Tensor, attention: Tensor) -> PromptInput:
        """Queries (B, D) and the components in use (P, n, L, W), keys and attention (P, n, D) -> prefixes."""
        B, heads, head_dim, half = len(query), self.model.num_heads, self.model.head_dim, self.c.prompt_length // 2
        prefixes = {}
        for j, block in enumerate(self.layers):
            prompt = torch.einsum("bn,nlw->blw", component_weights(query, keys[j], attention[j]), components[j])
            split = prompt.view(B, 2, half, heads, head_dim).transpose(2, 3)  # (B, 2, H, L/2, Dh)
            prefixes[block] = (split[:, 0], split[:, 1])
        return PromptInput(prefixes=prefixes)

    def in_use(self, tasks: int) -> Tuple[Tensor, ...]:
        """The pools' first ``tasks`` tasks' components: (P, tasks n, ...) each, in :data:`POOLS` order."""
        return tuple(self.pools[name][:, :tasks * self.per_task] for name in POOLS)

    def penalty(self, components: Tensor, keys: Tensor, attention: Tensor) -> Tensor:
        """Σ over blocks of o(K) + o(A) + o(P flattened): the orthogonality penalty before ``ortho_mu``."""
        return sum(ortho_penalty(keys[j]) + ortho_penalty(attention[j]) + ortho_penalty(components[j].flatten(1))
                   for j in range(len(self.layers)))

    # ---- learning -------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c, model, device, n = self.c, self.model, self.device, self.per_task
        start, end = task * n, (task + 1) * n
        if c.init == "gram_schmidt":
            self.draw_orthonormal(start, end, named_generator(self.cfg.seed, task, INIT_STREAM))
        new = {name: nn.Parameter(self.pools[name][:, start:end].clone()) for name in POOLS}
        in_use = lambda: tuple(torch.cat([self.pools[k][:, :start], new[k]], 1) for k in POOLS)  # noqa: E731
        params = [*new.values(), *model.gate_parameters_for(task), *self.head.parameters()]
        optimizer = torch.optim.Adam(params, lr=c.lr, betas=(0.9, 0.999), weight_decay=0.0)  # new per task
        model.eval()  # the frozen backbone in eval mode throughout

        def forward(batch):
            x, y, query = batch_with_query(model, batch, device)
            pools = in_use()
            out = {"logits": self.head(model(x, self.prompts(query, *pools))), "labels": y}
            if c.ortho_mu > 0:
                out["ortho"] = c.ortho_mu * self.penalty(*pools)
            return out

        terms = {"ce": cross_entropy_term(self.task_mask(task))}
        if c.ortho_mu > 0:
            terms["ortho"] = lambda out: out["ortho"]
        run_stage(Stage("coda", task, c.epochs, optimizer, epoch_scheduler(optimizer, c.schedule, c.epochs),
                        clip=c.grad_clip, clip_params=params, train_modules=[self.head], describe=model.gate_values,
                        lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward, terms=terms)
        self.head.eval()
        model.freeze_gates()
        for name in POOLS:
            self.pools[name][:, start:end] = new[name].detach()
        self.learned = task + 1

    # ---- prediction -----------------------------------------------------
    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """Frozen queries come from the cache; prompts are recomputed (components are added every task)."""
        query = self.frozen_query(batch, cache)
        logits = self.head(self.model(batch.images, self.prompts(query, *self.in_use(max(self.learned, 1)))))
        return Prediction(logits, logits)

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {**{name: pool.cpu() for name, pool in self.pools.items()}, "learned": self.learned,
                "gates": self.model.gate_state(),
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        for name, pool in self.pools.items():
            pool.copy_(state[name].to(self.device))
        self.learned = int(state["learned"])
        self.model.load_gate_state(state["gates"])
        self.head.load_state_dict(state["head"])

    def describe(self) -> Dict[str, Any]:
        """Besides the settings: per pool, the largest |cos| between learned rows of different tasks, averaged
        over blocks (0 right after the Gram-Schmidt draw; how far training moved them from orthogonality)."""
        c, pools = self.c, self.in_use(self.learned)
        cross = {name: sum(max_cross_task_cosine(pool[j].flatten(1), self.per_task) for j in range(len(self.layers)))
                 / len(self.layers) for name, pool in zip(POOLS, pools)}
        return {"name": self.name, "gate": c.gate, "components_per_task": self.per_task, "init": c.init,
                "max_cross_task_cosine": cross, "gates": self.model.gate_values()}

    def summary(self) -> str:
        c = self.c
        return (f"method: coda ({c.pool_size} components x {c.prompt_length} rows per block on blocks {self.layers}, "
                f"{self.per_task} new per task, {c.init} init; prefixes weighted by cos(q*A, K); gate "
                f"{c.gate['name']}; ortho_mu {c.ortho_mu})")
