"""Per-task diagnostics of HiDe-Prompt / NoRGa: did WTP, the prompt and the gate do any work?

After each task (``method.diagnostics: true``) the method records, in
``metrics.json["method"]["diagnostics"]`` and the task's log line:

* ``prompt_change`` — ‖e_t − e_t⁰‖ / ‖e_t⁰‖: the trained prompt against its
  initialisation (e_{t−1} after write-back, or U(−1, 1) for task 0), before write-back;
* ``feature_change_trained`` / ``feature_change_random`` — mean over the task's
  un-augmented training images of ‖f(x; p) − f(x)‖ / ‖f(x)‖, for the trained p_t
  and for a random prompt drawn like the initialisation and rescaled to p_t's norm:
  a trained prompt that changes features no more than a random one has learned
  little about them;
* ``wtp_first`` / ``wtp_last`` — WTP's epoch means (loss, ce, reg) of its first and last epoch;
* ``til_frozen_probe`` — task-incremental test accuracy (true task, logits over its
  classes) of a linear head trained on *frozen* features of the task with WTP's
  head recipe: what the frozen backbone gives without any prompt;
* ``til_prompted_before_tap`` / ``til_prompted_after_tap`` — the same accuracy of ψ
  on features prompted with p_t, right after WTP and after TAP (equal when TAP
  does not run): TAP retrains ψ on Gaussian samples and may wash out what WTP gained;
* the gate's report (NoRGa: α, τ per prompted layer) after the task.

Everything runs under :func:`torch.random.fork_rng` with its own generators, so
switching diagnostics on or off changes no other number of the run.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from ..toolkit.heads import init_linear_layers, masked_logits
from ..toolkit.seeding import task_generator
from ..toolkit.stages import extract_features, fit_on_features
from .hooks import hooked_stage

PROBE_STAGE, RANDOM_PROMPT_STAGE = 5, 6  # generator ids of task_generator(seed, task, stage)


def relative_change(new: Tensor, old: Tensor) -> float:
    """‖new − old‖ / ‖old‖ over all entries (0 when both are zero)."""
    scale = float(old.norm())
    return float((new - old).norm()) / scale if scale > 0 else 0.0


def mean_feature_change(prompted: Tensor, frozen: Tensor) -> float:
    """Mean over samples of ‖prompted_i − frozen_i‖ / ‖frozen_i‖; both (N, D)."""
    return float(((prompted - frozen).norm(dim=1) / frozen.norm(dim=1).clamp_min(1e-12)).mean())


def random_prompt_like(prompt: Tensor, generator: torch.Generator) -> Tensor:
    """U(−1, 1) like the initialisation, rescaled to the Frobenius norm of ``prompt`` (same shape)."""
    noise = torch.empty(prompt.shape).uniform_(-1.0, 1.0, generator=generator)
    return (noise * (prompt.norm().cpu() / noise.norm())).to(prompt)


@torch.no_grad()
def til_accuracy(head: nn.Module, feats: Tensor, labels: Tensor, allowed: Tensor) -> float:
    """Accuracy of ``head`` on (N, D) features with logits restricted to ``allowed`` (bool (C,))."""
    head.eval()
    logits = masked_logits(head(feats.to(allowed.device)), allowed)
    return (logits.argmax(1).cpu() == labels).sum().item() / max(len(labels), 1)


@hooked_stage("diagnostics")
def task_diagnostics(method, task: int, loaders, frozen_train: Tensor, prompted_train: Tensor,
                     train_labels: Tensor, head_before_tap: Dict[str, Tensor], wtp_init: Tensor,
                     wtp_trained: Tensor) -> Dict[str, object]:
    """The diagnostics of ``task`` for a :class:`~norga.methods.hideprompt.HiDePrompt` after it learned the task.

    ``frozen_train`` / ``prompted_train`` (N, D): features of the task's un-augmented training images;
    ``head_before_tap``: ψ's state right after WTP; ``wtp_init`` / ``wtp_trained``: e_t before / after WTP.
    """
    c, device, seed = method.c, method.device, method.cfg.seed
    model, prompt = method.model, method.task_prompts[task]
    with torch.random.fork_rng(devices=[]):
        random_prompt = random_prompt_like(prompt, task_generator(seed, task, RANDOM_PROMPT_STAGE))
        random_train, _ = extract_features(model, loaders.train_plain, device, random_prompt, "random-prompt feats")
        frozen_test, test_labels = method.frozen_pass(model, loaders.test, "diagnostic feats")
        prompted_test, _ = extract_features(model, loaders.test, device, prompt, "diagnostic feats")
        own = method.task_mask(task)
        probe = init_linear_layers(nn.Linear(model.embed_dim, method.num_classes), c.head_init).to(device)
        lr = method.lr_scaled(c.wtp.lr, c.wtp.batch_size) * c.wtp.head_lr_scale
        fit_on_features(probe, frozen_train, train_labels, own, c.wtp.epochs, lr, c.wtp.batch_size,
                        task_generator(seed, task, PROBE_STAGE), device, stage="probe", task=task,
                        lr_key=method.config_key("wtp.lr"))
        before = nn.Linear(model.embed_dim, method.num_classes).to(device)
        before.load_state_dict(head_before_tap)
    history = method.wtp_history or [{}]
    return {
        "task": task,
        "prompt_change": relative_change(wtp_trained, wtp_init),
        "feature_change_trained": mean_feature_change(prompted_train, frozen_train),
        "feature_change_random": mean_feature_change(random_train, frozen_train),
        "wtp_first": history[0], "wtp_last": history[-1],
        "til_frozen_probe": til_accuracy(probe, frozen_test, test_labels, own),
        "til_prompted_before_tap": til_accuracy(before, prompted_test, test_labels, own),
        "til_prompted_after_tap": til_accuracy(method.head, prompted_test, test_labels, own),
        "gate": method.gate_values(),
    }


def summary(d: Optional[Dict[str, object]]) -> str:
    """The diagnostics in the task's log line."""
    if not d:
        return ""
    return (f"prompt Δ {d['prompt_change']:.3f}, feature Δ trained {d['feature_change_trained']:.3f} vs random "
            f"{d['feature_change_random']:.3f}, TIL prompted {d['til_prompted_before_tap']:.3f} → "
            f"{d['til_prompted_after_tap']:.3f} after TAP vs frozen probe {d['til_frozen_probe']:.3f}")
