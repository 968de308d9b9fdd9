"""DualPrompt as a registered method (``method.name: dualprompt``), its prefixes through the gate registry.

Prompts (options in :mod:`norga.methods.dualprompt_config`), all prefixes (prefix tuning):

* the **G-prompt** g, (P_g, 2, L_g, H, Dh): L_g prefix keys and L_g prefix values on each block of
  ``g_prompt_layers``, shared by all tasks and trained on every task;
* one **E-prompt** e_t, (P_e, 2, L_e, H, Dh), per task on the blocks of ``e_prompt_layers``, with a key
  k_t (D,). Every prefix score passes through the configured gate (``linear`` = DualPrompt; ``norga`` =
  NoRGa's residual gate on DualPrompt's prefixes, its parameters training on the tasks the gate says).

Training task t: every sample uses e_t (the official ``use_prompt_mask``), e_t starts as a copy of
e_{t-1} (``e_prompt_init: previous``, official ``shared_prompt_pool``), and the loss is CE over the
task's classes − ``pull_coeff`` · mean_b cos(q_b, k_t), with q = the frozen backbone's class-token
pre-logits (a forward without prompts). Only g, e_t, k_t, the head and the trainable gates change.

Test (per sample, never a batch vote): task of sample b = argmax over the learned tasks of cos(q_b, k_t);
its prediction uses that task's E-prompt. With the true task given, the true task's E-prompt is used.
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
from .base import Prediction, PrefixMethod, TaskLoaders, TestBatch, batch_with_query, check_blocks, scaled_lr

INIT_STREAM = "dualprompt.init"  # the prompts' and keys' initialisation: named_generator(seed, 0, INIT_STREAM)


def nearest_key(query: Tensor, keys: Tensor) -> Tensor:
    """Index of each query's most cosine-similar key: query (B, D), keys (T, D) -> (B,) long; ties to the lower."""
    sim = F.normalize(query, dim=-1) @ F.normalize(keys, dim=-1).T
    return sim.sort(dim=1, descending=True, stable=True).indices[:, 0]


def as_prefixes(prompt: Tensor, blocks) -> Dict[int, tuple]:
    """Prompts (B or 1, P, 2, L, H, Dh) -> {block: (keys, values)}, each (B or 1, H, L, Dh), for ``blocks`` (P)."""
    return {int(b): (prompt[:, j, 0].transpose(1, 2), prompt[:, j, 1].transpose(1, 2)) for j, b in enumerate(blocks)}


@register_method("dualprompt")
class DualPrompt(PrefixMethod):
    """``g_prompt`` (P_g, 2, L_g, H, Dh), ``e_prompts`` (T, P_e, 2, L_e, H, Dh), ``keys`` (T, D), ``head``."""

    def __init__(self, vit, task_classes, cfg, device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = c = cfg.method
        self.g_layers = list(c.g_prompt_layers) if c.g_prompt_length > 0 else []
        self.e_layers = list(c.e_prompt_layers)
        check_blocks(vit, {"method.g_prompt_layers": self.g_layers, "method.e_prompt_layers": self.e_layers})
        self.model = self.gated_prefix_model(vit, sorted(self.g_layers + self.e_layers))
        heads, head_dim, dim = self.model.num_heads, self.model.head_dim, self.model.embed_dim
        g = named_generator(cfg.seed, 0, INIT_STREAM)
        uniform = lambda *shape: (2 * torch.rand(*shape, generator=g) - 1).to(device)  # noqa: E731 - U(-1, 1)
        self.g_prompt = nn.Parameter(uniform(len(self.g_layers), 2, c.g_prompt_length, heads, head_dim))
        self.e_prompts = uniform(self.num_tasks, len(self.e_layers), 2, c.e_prompt_length, heads, head_dim)
        self.keys = uniform(self.num_tasks, dim)
        self.learned = 0
        self.head = init_linear_layers(nn.Linear(dim, self.num_classes), c.head_init).to(device)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def prompts(self, e_prompts: Tensor) -> PromptInput:
        """E-prompts (B or 1, P_e, 2, L_e, H, Dh) -> the forward's prefixes, with the G-prompt on its blocks."""
        prefixes = as_prefixes(self.g_prompt.unsqueeze(0), self.g_layers)
        prefixes.update(as_prefixes(e_prompts, self.e_layers))
        return PromptInput(prefixes=prefixes)

    # ---- learning -------------------------------------------------------
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        c, model, device = self.c, self.model, self.device
        if task > 0 and c.e_prompt_init == "previous":
            self.e_prompts[task] = self.e_prompts[task - 1]
        e_prompt, key = nn.Parameter(self.e_prompts[task].clone()), nn.Parameter(self.keys[task].clone())
        params = [self.g_prompt, e_prompt, key, *model.gate_parameters_for(task), *self.head.parameters()]
        lr = scaled_lr(c.lr, c.batch_size, c.scale_lr_by_batch)
        optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), weight_decay=0.0)  # new per task
        model.eval()  # the frozen backbone in eval mode throughout

        def forward(batch):
            x, y, query = batch_with_query(model, batch, device)
            logits = self.head(model(x, self.prompts(e_prompt.unsqueeze(0))))
            return {"logits": logits, "labels": y, "similarity": F.cosine_similarity(query, key[None])}

        run_stage(Stage("dualprompt", task, c.epochs, optimizer, clip=c.grad_clip, clip_params=params,
                        train_modules=[self.head], describe=model.gate_values, lr_key=self.config_key("lr")),
                  batches=lambda epoch: loaders.train, forward=forward,
                  terms={"ce": cross_entropy_term(self.task_mask(task)),
                         "pull": lambda out: -c.pull_coeff * out["similarity"].mean()})
        self.head.eval()
        model.freeze_gates()
        self.e_prompts[task], self.keys[task] = e_prompt.detach(), key.detach()
        self.learned = task + 1

    # ---- prediction -----------------------------------------------------
    def select_tasks(self, query: Tensor) -> Tensor:
        """Frozen queries (B, D) -> the E-prompt (task) of each sample (B,), among the learned tasks."""
        return nearest_key(query, self.keys[:max(self.learned, 1)])

    def _logits(self, x: Tensor, tasks: Tensor) -> Tensor:
        return self.head(self.model(x, self.prompts(self.e_prompts[tasks])))

    def predict_batch(self, batch: TestBatch, cache: FeatureCache) -> Prediction:
        """Frozen queries come from the cache; prompted features are recomputed (the G-prompt and head change)."""
        query = self.frozen_query(batch, cache)
        tasks = self.select_tasks(query)
        logits = self._logits(batch.images, tasks)
        true_logits, wrong = logits.clone(), tasks != batch.task
        if wrong.any():  # with the true task given: its E-prompt (recomputed only where the selection missed it)
            true_logits[wrong] = self._logits(batch.images[wrong], torch.full_like(tasks[wrong], batch.task))
        return Prediction(logits, true_logits, tasks)

    # ---- state ----------------------------------------------------------
    def state_dict(self, task: int) -> Dict[str, Any]:
        return {"g_prompt": self.g_prompt.detach().cpu(), "e_prompts": self.e_prompts.cpu(),
                "keys": self.keys.cpu(), "learned": self.learned,
                "gates": self.model.gate_state(),
                "head": {k: v.cpu() for k, v in self.head.state_dict().items()}}

    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        with torch.no_grad():
            self.g_prompt.copy_(state["g_prompt"].to(self.device))
        self.e_prompts.copy_(state["e_prompts"].to(self.device))
        self.keys.copy_(state["keys"].to(self.device))
        self.learned = int(state["learned"])
        self.model.load_gate_state(state["gates"])
        self.head.load_state_dict(state["head"])

    def describe(self) -> Dict[str, Any]:
        c = self.c
        return {"name": self.name, "gate": c.gate, "g_prompt": {"layers": self.g_layers, "length": c.g_prompt_length},
                "e_prompt": {"layers": self.e_layers, "length": c.e_prompt_length}, "gates": self.model.gate_values()}

    def summary(self) -> str:
        c = self.c
        return (f"method: dualprompt (G-prompt {c.g_prompt_length} prefixes on blocks {self.g_layers}; one E-prompt "
                f"of {c.e_prompt_length} prefixes per task on blocks {self.e_layers}, chosen per sample by the "
                f"nearest key; gate {c.gate['name']}; pull coeff {c.pull_coeff})")
