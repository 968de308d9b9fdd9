"""The run config's dataclasses: the run itself, ``data``, ``model``, ``logging``, and the base of every method
section."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from .fields import ConfigError, _f
from .registry import method_config_class


@dataclass
class DataConfig:
    # registered benchmark (`norga list`): synthetic, array, cifar100, imagenet_r, cub200, five_datasets, ...
    name: str = _f("synthetic")
    root: Optional[str] = _f(None)  # the benchmark's folder or file (null: none needed, e.g. synthetic)
    num_tasks: int = _f(10, ge=1)  # number of tasks T
    classes_per_task: Optional[int] = _f(None, ge=1)  # classes per task (null: all classes / num_tasks)
    # classes of the first task when it differs (null: classes_per_task)
    first_task_classes: Optional[int] = _f(None, ge=1)
    # seed (shuffled by class_order_rng), natural, or an explicit list of class ids
    class_order: Union[str, List[int]] = _f("seed")
    # how 'seed' shuffles: python = random.seed(seed); random.shuffle(range(C)) (authors' code); numpy = RandomState
    class_order_rng: str = _f("python", choices=("python", "numpy"))
    # image transforms: official = the authors' recipe for this benchmark (norga.data.transforms.RECIPES);
    # backbone = bilinear crop + flip, the backbone's mean/std; or a recipe name (cifar100, imagenet_r, ...)
    transforms: str = _f("official")
    image_size: Optional[int] = _f(None, ge=8)  # None: the backbone's own input size
    download: bool = _f(False)  # download the data set where it can be downloaded (torchvision data sets)
    train_per_class: Optional[int] = _f(None, ge=1)  # use only the first N training images of every class (null: all)
    test_per_class: Optional[int] = _f(None, ge=1)  # use only the first N test images of every class (null: all)
    # loader worker processes; auto = min(8, CPUs - 1). Augmentation draws differ with the number of workers,
    # so runs are reproducible for a fixed number (default 0: the main process)
    num_workers: Union[int, str] = _f(0)
    # benchmark-specific options (e.g. synthetic: num_classes, train_per_class, test_per_class)
    options: Dict[str, Any] = _f({})

    def __post_init__(self):
        if self.num_workers != "auto" and (not isinstance(self.num_workers, int) or self.num_workers < 0):
            raise ConfigError(f"data.num_workers: expected an integer >= 0 or 'auto', got {self.num_workers!r}")


HUB_PREFIXES = ("hf-hub:", "hf_hub:")  # model.checkpoint / model.name from the Hugging Face Hub


def is_hub_reference(value) -> bool:
    """Whether a ``model.checkpoint`` / ``model.name`` value names a Hub repo (``hf-hub:ORG/NAME``, ``hf_hub:``)."""
    return isinstance(value, str) and value.startswith(HUB_PREFIXES)


@dataclass
class ModelConfig:
    """The frozen backbone (what prompts and gates attach to is the method's business: ``method.*``)."""

    preset: Optional[str] = _f(None)  # a backbone preset (`norga list`), e.g. sup21k: ViT-B/16 ImageNet-21K
    name: Optional[str] = _f(None)  # timm model name; overrides the preset's
    # a local checkpoint file for the backbone (timm / safetensors / the presets' formats), or a Hugging Face Hub
    # repo's: hf-hub:ORG/NAME, optionally /FILE and @REVISION (taken from the local cache when there)
    checkpoint: Optional[str] = _f(None)
    pretrained: bool = _f(False)  # load timm's pretrained weights from the hub (needs the internet or timm's cache)
    # extra timm.create_model arguments, e.g. a tiny architecture {patch_size: 4, embed_dim: 64}
    timm_kwargs: Dict[str, Any] = _f({})


@dataclass
class MethodConfig:
    """Base of every method's config section (``method:``); ``name`` selects the registered method.

    A method's section is a dataclass subclass registered with
    :func:`method_config` in a torch-free module, so configs are
    checked before torch is imported. ``report(cfg)`` is printed by ``--dry-run``.
    """

    name: str = _f("norga")

    def report(self, cfg: "Config") -> str:
        return ""


@dataclass
class LoggingConfig:
    tensorboard: bool = _f(False)  # also write the per-epoch log as TensorBoard scalars to DIR/tensorboard/
    # experiment trackers, any subset of TRACKER_NAMES (norga.toolkit.trackers); tensorboard: true means [tensorboard]
    trackers: List[str] = _f([])

    def __post_init__(self):
        unknown = [name for name in self.trackers if name not in TRACKER_NAMES]
        if unknown:
            raise ConfigError(f"logging.trackers: unknown {unknown}; choose from {list(TRACKER_NAMES)}")
        if len(set(self.trackers)) != len(self.trackers):
            raise ConfigError(f"logging.trackers: {self.trackers} names a tracker twice")


TRACKER_NAMES = ("tensorboard", "wandb", "mlflow")


DEFAULT_METHOD = "norga"


def _default_method() -> MethodConfig:
    return method_config_class(DEFAULT_METHOD)()


AMP_MODES = ("off", "bf16", "fp16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")  # torch.compile modes of the backbone


@dataclass
class Config:
    # seeds the class order, initialisations and every stage (per task and stage, so resumed runs are exact)
    seed: int = _f(42)
    device: str = _f("auto")  # auto (CUDA if available), cpu, cuda or cuda:K
    # backbone autocast: off, bf16 or fp16 (with a loss scaler); prompts, gates, heads, statistics stay fp32
    amp: Union[str, bool] = _f("off")  # YAML reads a bare off as false: both mean "off"
    # torch.compile of the backbone forward: off, default, reduce-overhead or max-autotune (true = default)
    compile: Union[str, bool] = _f("off")
    # evaluation and feature-extraction batch (changes no number: predictions are per sample)
    eval_batch_size: int = _f(256, ge=1)
    # true: classifier logits restricted to classes seen so far (standard class-incremental evaluation);
    # false: all classes compete in the argmax (authors' code). A method's own task inference is not affected.
    eval_mask_unseen: bool = _f(True)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodConfig = field(default_factory=_default_method, metadata={"method": True})
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self):
        problems = []
        if not 0 <= self.seed < 2**43:  # named random streams need it (norga.toolkit.seeding)
            problems.append(f"seed: expected an integer in [0, 2**43), got {self.seed!r}")
        if self.amp is False:
            self.amp = "off"
        if self.amp not in AMP_MODES:
            problems.append(f"amp: {self.amp!r} is not one of {list(AMP_MODES)}")
        if isinstance(self.compile, bool):
            self.compile = "default" if self.compile else "off"
        if self.compile not in COMPILE_MODES:
            problems.append(f"compile: {self.compile!r} is not one of {list(COMPILE_MODES)} (or true / false)")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(self.device)):
            problems.append(f"device: expected auto, cpu, cuda or cuda:K (K = a GPU index), got {self.device!r}")
        if problems:
            raise ConfigError.listing(problems)


# Keys of the norga 0.1/0.2 layout -> where they live now (an old config gets an error naming the new key).
MOVED_KEYS = {
    "tii": "method.tii", "wtp": "method.wtp", "tap": "method.tap", "stats": "method.stats",
    "head_init": "method.head_init", "scale_lr_by_batch": "method.scale_lr_by_batch",
    "model.prompt_layers": "method.prompt_layers", "model.prompt_length": "method.prompt_length",
    "model.gate": "method.gate.name", "model.activation": "method.gate.activation",
}
