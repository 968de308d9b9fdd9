"""What the task loop needs from a continual-learning method (:class:`Method`).

The runner, the evaluation, the metrics and the run directory only talk to
this interface; they never name a method, a gate or a head. A method

* learns task t from its loaders (:meth:`Method.learn_task`);
* predicts a test batch (:meth:`Method.predict`, which calls the method's
  :meth:`Method.predict_batch`): class logits without the task
  id, class logits with the true task id given, and, when it infers one, the
  task id per sample — each sample's prediction depends on that sample only;
* says what of its evaluation work can be reused across evaluations
  (:meth:`Method.new_eval_cache`; a :class:`~norga.toolkit.feature_cache.FeatureCache` by default);
* saves and restores the state after each task (:meth:`Method.state_dict`);
* describes itself for ``metrics.json`` (:meth:`Method.describe`) and for
  ``--dry-run`` (:meth:`Method.summary`).

The engine reseeds the global random generators from (seed, task) before every
:meth:`Method.learn_task`, so a method needs no seeding of its own; stages that shuffle
draw from :func:`norga.toolkit.seeding.task_generator`. Register an implementation with
:func:`norga.methods.register_method`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..config import ConfigError
from ..gates.modules import GateFactory
from ..models.lora_qkv import attach_lora_qkv
from ..models.prompted_vit import PromptedViT
from ..toolkit.devices import to_device
from ..toolkit.feature_cache import FeatureCache, frozen_features
from ..toolkit.heads import class_mask
from ..toolkit.stages import extract_features
from .hooks import HOOKS, MethodHooks


@dataclass
class TaskLoaders:
    """Loaders of one task: augmented train (batches of :attr:`Method.train_batch_size`), un-augmented train
    (statistics; evaluation batch size), test."""

    train: object
    train_plain: object
    test: object


@dataclass
class TestBatch:
    """A batch of test samples of one task.

    ``images`` (B, 3, H, W) on the method's device; ``task``: the test task they come from;
    ``index`` (B,) their positions in that task's test set (fixed order), of ``size`` samples;
    ``seen`` bool (C,): classes of the tasks learned so far; ``dataset``: that test set (for a feature store).
    """

    images: Tensor
    task: int
    index: Tensor
    size: int
    seen: Tensor
    dataset: Any = None


@dataclass
class Prediction:
    """``logits`` (B, C): class logits without the task id (class-incremental); ``true_task_logits`` (B, C): with
    the true task id given (task-incremental); ``task_ids`` (B,): the task the method inferred per sample, or None
    for methods that infer none. C = all classes of the benchmark; the evaluation masks them."""

    logits: Tensor
    true_task_logits: Tensor
    task_ids: Optional[Tensor] = None


class Method(ABC):
    """A class-incremental learner on a frozen timm ViT (subclass it and :func:`register_method` it)."""

    name = "base"
    # a :class:`~norga.toolkit.feature_store.FeatureStore` the engine sets under ``--feature-cache`` (None: off)
    feature_store: Any = None
    # the declared hook points (norga/methods/hooks.py): what the cross-checks and the speed report may observe or
    # replace (stages, first-task tuning, created heads, drawn adapters); nothing registered = no effect
    hooks: MethodHooks = HOOKS

    def __init__(self, vit: nn.Module, task_classes: Sequence[Sequence[int]], cfg, device: torch.device):
        self.cfg, self.device = cfg, device
        self.task_classes: List[List[int]] = [list(c) for c in task_classes]
        self.num_tasks = len(self.task_classes)
        self.num_classes = sum(len(c) for c in self.task_classes)
        self.class_to_task = torch.empty(self.num_classes, dtype=torch.long)
        for t, classes in enumerate(self.task_classes):
            self.class_to_task[classes] = t

    @classmethod
    def resolve_config(cls, method_cfg):
        """The method's config section with defaults the torch-free config layer cannot know filled in
        (known only once the method's module is imported); what ``config.yaml`` stores. Default: unchanged."""
        return method_cfg

    @property
    @abstractmethod
    def train_batch_size(self) -> int:
        """Batch size of the augmented training loader."""

    @abstractmethod
    def learn_task(self, task: int, loaders: TaskLoaders) -> None:
        """Train on task ``task`` (0-based); tasks come in order 0, 1, ..."""

    @torch.no_grad()
    def predict(self, batch: TestBatch, cache: Any = None) -> Prediction:
        """Predictions for a test batch: no gradients, every module of the method in eval mode, ``cache`` this
        method's :meth:`new_eval_cache` (a new one when None); the method's own part is :meth:`predict_batch`."""
        cache = cache if cache is not None else self.new_eval_cache()
        for module in self.modules():
            module.eval()
        with self.hooks.stage("evaluation"):
            return self.predict_batch(batch, cache)

    @abstractmethod
    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        """The method's predictions for a test batch (called by :meth:`predict`, under no_grad, modules in eval)."""

    def new_eval_cache(self) -> Any:
        """An object :meth:`predict` may fill with work that stays valid for the whole run: by default a
        :class:`~norga.toolkit.feature_cache.FeatureCache` (frozen features of a test sample never change)."""
        return FeatureCache()

    def modules(self) -> List[nn.Module]:
        """The torch modules the method holds as attributes (switched to eval mode for prediction)."""
        return [value for value in vars(self).values() if isinstance(value, nn.Module)]

    # ---- what every method's training uses ----------------------------
    def task_mask(self, task: int) -> Tensor:
        """Bool (C,) on the device: the classes of task ``task`` (the cross-entropy of that task's training)."""
        return class_mask(self.num_classes, self.task_classes[task], self.device)

    def seen_mask(self, task: int) -> Tensor:
        """Bool (C,) on the device: the classes of tasks 0..``task``."""
        return class_mask(self.num_classes, self.seen_classes(task), self.device)

    @staticmethod
    def config_key(path: str) -> str:
        """The full config key of an option of the method's section, e.g. ``"wtp.lr"`` -> ``"method.wtp.lr"``
        (named by errors, e.g. a diverged stage's advice to lower its learning rate)."""
        return f"method.{path}"

    @abstractmethod
    def state_dict(self, task: int) -> Dict[str, Any]:
        """Everything needed to continue after ``task``: tensors and plain values (``torch.load(weights_only)``)."""

    @abstractmethod
    def load_state_dict(self, state: Dict[str, Any], with_training_state: bool = True) -> None:
        """Restore the state saved after a task; ``with_training_state=False``: only what prediction needs."""

    def describe(self) -> Dict[str, Any]:
        """Plain values for ``metrics.json["method"]`` (e.g. gate values, prompt statistics)."""
        return {"name": self.name}

    def summary(self) -> str:
        """One line for ``--dry-run`` and the run log."""
        return f"method: {self.name}"

    def task_summary(self, task: int) -> str:
        """What the method adds to task ``task``'s log line (e.g. diagnostics); default nothing."""
        return ""

    def frozen_token_model(self, vit: nn.Module):
        """The frozen backbone as a PromptedViT without prefix blocks (prompt tokens only), on the device."""
        model = PromptedViT(vit, prompt_layers=())
        model.freeze_backbone()
        return model.to(self.device)

    @torch.no_grad()
    def frozen_query(self, batch: "TestBatch", cache) -> Tensor:
        """The frozen backbone's features (B, D) of a test batch on the device: ``self.model`` without prompts,
        each sample computed once per run through ``cache`` (a :class:`~norga.toolkit.feature_cache.FeatureCache`)."""
        self.preload_frozen(self.model, batch, cache)
        return frozen_features(self.model, batch.images, batch.index, cache, batch.task, batch.size).to(self.device)

    def frozen_pass(self, model: nn.Module, loader, desc: str = "frozen feats") -> Tuple[Tensor, Tensor]:
        """Features (N, D) and labels (N,) of an un-augmented ``loader`` under ``model``'s frozen forward (no
        prompts, no tuning): :func:`~norga.toolkit.stages.extract_features`, or the feature store when one is set."""
        with self.hooks.stage("diagnostics" if "diagnostic" in desc else "statistics"):
            if self.feature_store is None:
                return extract_features(model, loader, self.device, desc=desc)
            return self.feature_store.loader_features(model, loader, self.device, desc)

    def preload_frozen(self, model: nn.Module, batch: "TestBatch", cache) -> None:
        """With a feature store: fill ``cache``'s frozen slot of the batch's test task (the frozen forward of
        ``model``) from the store, once per task; otherwise nothing."""
        if self.feature_store is None or batch.dataset is None or batch.task in cache.frozen:
            return
        feats, _ = self.feature_store.dataset_features(model, batch.dataset, self.device, "frozen test feats")
        cache.frozen[batch.task] = (feats, torch.ones(len(feats), dtype=torch.bool))

    def seen_classes(self, task: int) -> List[int]:
        return [c for t in range(task + 1) for c in self.task_classes[t]]


def batch_with_query(model: nn.Module, batch: Sequence[Tensor], device: torch.device
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """A training batch of a key-matching method: (images [B, 3, H, W], labels [B], query [B, D]) on ``device``;
    the query is ``model(images)`` without prompts and without gradient (the frozen backbone's class token)."""
    x, y = batch
    x = to_device(x, device)  # from the loader's pinned memory on CUDA: the host does not wait for the copy
    with torch.no_grad():
        query = model(x)
    return x, to_device(y, device), query


def scaled_lr(lr: float, batch_size: int, scale: bool) -> float:
    """``lr`` x batch / 256 when ``scale`` (the linear scaling rule of the official scripts), else ``lr``."""
    return lr * batch_size / 256 if scale else lr


class PrefixMethod(Method):
    """A method whose prompts are prefixes through a registered gate: its config has ``gate: {name, options}``,
    checked and resolved (every option's value filled in) when the config was read
    (:func:`norga.gates.schema.gate_section`), so ``config.yaml`` stores every value. The spec becomes
    :attr:`gate` (a :class:`~norga.gates.modules.GateFactory`) once, which every prompted block receives."""

    def __init__(self, vit: nn.Module, task_classes: Sequence[Sequence[int]], cfg, device: torch.device):
        super().__init__(vit, task_classes, cfg, device)
        self.gate = GateFactory(cfg.method.gate)

    def gated_prefix_model(self, vit: nn.Module, prompt_layers: Sequence[int]) -> PromptedViT:
        """The frozen backbone as a PromptedViT with prefix attention through :attr:`gate` on blocks
        ``prompt_layers``, on the device."""
        model = PromptedViT(vit, prompt_layers=prompt_layers, gate=self.gate)
        model.freeze_backbone()
        return model.to(self.device)


def check_blocks(vit: nn.Module, layers: Dict[str, Sequence[int]]) -> None:
    """Raise one ConfigError naming the config key whose block indices this backbone does not have."""
    depth = len(vit.blocks)
    for key, blocks in layers.items():
        bad = [int(b) for b in blocks if not 0 <= int(b) < depth]
        if bad or len(set(blocks)) != len(blocks):
            raise ConfigError(f"{key}={list(blocks)}: needs distinct block indices in [0, {depth - 1}] (this "
                              f"backbone has {depth} blocks); set {key} to blocks it has")


def chosen_blocks(vit: nn.Module, option: Optional[Sequence[int]], key: str) -> List[int]:
    """Block indices of a ``method.*_layers`` option (null: every block of ``vit``), checked against the backbone
    (a ConfigError names ``key``, e.g. ``"method.adapter_layers"``)."""
    layers = list(range(len(vit.blocks))) if option is None else [int(i) for i in option]
    check_blocks(vit, {key: layers})
    return layers


class LoRAMethod(Method):
    """A method training LoRA branches on the fused qkv of the blocks of ``method.lora_layers`` (``targets``: which of
    q, k, v; InfLoRA: k, v; SD-LoRA: q, v) and one linear head over all classes. Sets ``c`` (the method's config
    section), ``model`` (the frozen token model), ``layers`` (block indices), ``wrappers`` (qkv wrappers by block)
    and ``head`` (D -> C, torch's default init); ``method.batch_size`` is the training batch. Predicts with
    ``head`` over the adapted features."""

    targets: Tuple[str, ...] = ()

    def __init__(self, vit: nn.Module, task_classes: Sequence[Sequence[int]], cfg, device: torch.device):
        super().__init__(vit, task_classes, cfg, device)
        self.c = cfg.method
        self.model = self.frozen_token_model(vit)
        self.layers = chosen_blocks(vit, self.c.lora_layers, "method.lora_layers")
        self.wrappers = attach_lora_qkv(vit, self.layers, self.targets).to(device)
        self.head = nn.Linear(self.model.embed_dim, self.num_classes).to(device)

    @property
    def train_batch_size(self) -> int:
        return self.c.batch_size

    def predict_batch(self, batch: TestBatch, cache: Any) -> Prediction:
        """(B, C) head logits of the LoRA-adapted features, with and without the task id alike (none inferred)."""
        logits = self.head(self.model(batch.images).float())
        return Prediction(logits, logits)
