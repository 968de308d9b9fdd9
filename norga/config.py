"""Typed run configuration: dataclasses loaded from YAML, strict validation.

``load_config(path, overrides=["wtp.epochs=3", ...])`` returns a :class:`Config`.
Unknown keys, wrong types and out-of-range values raise :class:`ConfigError`
naming the key path (e.g. ``wtp.lr``). Booleans accept only true/false.
See README "Config reference" for every field.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml


class ConfigError(ValueError):
    """A config value is unknown, mistyped or out of range (message names the key path)."""


def _f(default=dataclasses.MISSING, *, ge=None, gt=None, le=None, choices=None, **kw):
    """Field with validation metadata (ge/gt/le bounds, allowed choices)."""
    meta = {"ge": ge, "gt": gt, "le": le, "choices": choices}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


@dataclass
class DataConfig:
    name: str = _f("synthetic")
    root: Optional[str] = _f(None)
    num_tasks: int = _f(10, ge=1)
    classes_per_task: Optional[int] = _f(None, ge=1)
    first_task_classes: Optional[int] = _f(None, ge=1)
    class_order: Union[str, List[int]] = _f("seed")
    # how 'seed' shuffles: python = random.seed(seed); random.shuffle(range(C)) (authors' code); numpy = RandomState
    class_order_rng: str = _f("python", choices=("python", "numpy"))
    # image transforms: official = the authors' recipe for this benchmark (norga.data.transforms.RECIPES);
    # backbone = bilinear crop + flip, the backbone's mean/std; or a recipe name (cifar100, imagenet_r, ...)
    transforms: str = _f("official")
    image_size: Optional[int] = _f(None, ge=8)  # None: the backbone's own input size
    download: bool = _f(False)
    train_per_class: Optional[int] = _f(None, ge=1)
    test_per_class: Optional[int] = _f(None, ge=1)
    num_workers: int = _f(0, ge=0)
    options: Dict[str, Any] = _f({})


@dataclass
class ModelConfig:
    preset: Optional[str] = _f(None)
    name: Optional[str] = _f(None)  # timm model name; overrides the preset's
    checkpoint: Optional[str] = _f(None)
    pretrained: bool = _f(False)
    timm_kwargs: Dict[str, Any] = _f({})
    prompt_layers: List[int] = _f([0, 1, 2, 3, 4])
    prompt_length: int = _f(5, ge=0)  # 0: no prompts (frozen-backbone reference with the same TII/TAP)
    gate: str = _f("norga")
    activation: str = _f("tanh", choices=("tanh", "sigmoid", "gelu"))


@dataclass
class StatsConfig:
    kind: str = _f("covariance", choices=("covariance", "variance", "multi_centroid"))
    ridge: float = _f(1e-4, ge=0.0)
    n_centroids: int = _f(10, ge=1)


@dataclass
class TIIConfig:
    epochs: int = _f(20, ge=0)
    lr: float = _f(0.0005, gt=0.0)
    batch_size: int = _f(128, ge=1)
    mlp_ratios: List[int] = _f([2])
    align_epochs: int = _f(30, ge=0)
    align_lr: float = _f(0.005, gt=0.0)
    samples_per_class: int = _f(128, ge=1)  # pseudo-features per seen class and alignment epoch
    align_batches: str = _f("old_classes", choices=("old_classes", "all"))  # batches per alignment epoch
    scale_align_lr: bool = _f(True)  # align_lr * batch / 256 too (authors' code), when scale_lr_by_batch
    # official: the authors' single post-LN residual block over mlp_ratios; pre_norm: a pre-LN block per ratio
    mlp_style: str = _f("official", choices=("official", "pre_norm"))
    grad_clip: Optional[float] = _f(1.0, gt=0.0)  # max grad norm in TII training (authors: 1.0)
    cache_features: bool = _f(False)  # train on frozen features of un-augmented images, computed once


@dataclass
class WTPConfig:
    epochs: int = _f(50, ge=0)
    lr: float = _f(0.03, gt=0.0)
    batch_size: int = _f(128, ge=1)
    schedule: str = _f("step", choices=("constant", "step", "cosine"))
    milestones: List[int] = _f([30])
    gamma: float = _f(0.1, gt=0.0)
    min_lr: float = _f(1e-5, ge=0.0)  # floor of the cosine schedule (timm's lr_min in the authors' scripts)
    # timm: scheduler.step(epoch) after each epoch sets the next epoch's lr from the finished epoch's index, so a
    # change "at epoch 30" first applies to 0-based epoch 31 (authors); torch: it applies to epoch 30
    schedule_stepping: str = _f("timm", choices=("timm", "torch"))
    head_lr_scale: float = _f(0.1, gt=0.0)  # "larger prompt lr": head gets head_lr_scale * lr
    reg: float = _f(0.1, ge=0.0)  # lambda of the contrastive regulariser
    # official: CE(M M^T / temperature, identity) on M = [old class means; batch features], every task (authors'
    # code); eq56: the paper's eq. 56 on L2-normalised features, tasks t > 0 only
    reg_form: str = _f("official", choices=("official", "eq56"))
    temperature: float = _f(0.8, gt=0.0)
    momentum: float = _f(0.01, ge=0.0, le=1.0)  # prompt-ensemble m
    grad_clip: Optional[float] = _f(1.0, gt=0.0)
    label_smoothing: float = _f(0.0, ge=0.0, le=1.0)  # authors' code: none (the flag is parsed, never used)
    prompt_writeback: bool = _f(True)  # after WTP store p_t (ensembled) as e_t (authors); false: keep raw e_t


@dataclass
class TAPConfig:
    epochs: int = _f(80, ge=0)
    lr: float = _f(0.05, gt=0.0)
    batch_size: int = _f(640, ge=1)  # authors: 5 x the training batch
    samples_per_class: int = _f(640, ge=1)  # authors: 5 x the training batch
    batches: str = _f("old_classes", choices=("old_classes", "all"))  # batches per epoch (see tii.align_batches)
    after_first_task: bool = _f(False)  # authors' code runs TAP only for tasks t > 0


@dataclass
class LoggingConfig:
    tensorboard: bool = _f(False)  # also write the per-epoch log as TensorBoard scalars to DIR/tensorboard/


@dataclass
class Config:
    seed: int = _f(42)
    device: str = _f("auto", choices=("auto", "cpu", "cuda"))
    scale_lr_by_batch: bool = _f(True)  # TII, TII-alignment (see tii.scale_align_lr) and WTP lr * batch / 256
    eval_batch_size: int = _f(256, ge=1)
    # true: classifier logits restricted to classes seen so far (standard class-incremental evaluation);
    # false: all classes compete in the argmax (authors' code). TII logits are always restricted.
    eval_mask_unseen: bool = _f(True)
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))  # linear layers of both heads
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    tii: TIIConfig = field(default_factory=TIIConfig)
    wtp: WTPConfig = field(default_factory=WTPConfig)
    tap: TAPConfig = field(default_factory=TAPConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self):
        if self.tap.after_first_task and self.tap.batches == "old_classes":
            raise ConfigError("tap.after_first_task=true with tap.batches=old_classes would run 0 TAP batches after "
                              "the first task (C_old = 0); set tap.batches=all, or tap.after_first_task=false")


def load_config(path: Optional[Union[str, Path]] = None, overrides: Optional[List[str]] = None) -> Config:
    """Read YAML (or start from defaults), apply ``key.path=value`` overrides, validate."""
    raw: Dict[str, Any] = {} if path is None else _read_yaml_file(Path(path))
    for item in overrides or []:
        _apply_override(raw, item)
    return from_dict(Config, raw, "")


def _yaml_problem(err: yaml.YAMLError) -> str:
    """'line L, column C: problem' of a YAML error (one line)."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return where + " ".join(str(problem).split())


def _read_yaml_file(path: Path) -> Dict[str, Any]:
    """A config file's top-level mapping; every problem is one ConfigError naming the file."""
    if path.is_dir():
        raise ConfigError(f"config path {path} is a folder; give a YAML file, e.g. configs/smoke.yaml")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML at {_yaml_problem(err)}") from err
    if raw is None:
        raise ConfigError(f"{path} is empty; start from a shipped config, e.g. configs/smoke.yaml")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values")
    return raw


def config_to_dict(cfg: Config) -> Dict[str, Any]:
    return dataclasses.asdict(cfg)


def _apply_override(raw: Dict[str, Any], item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, text = item.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key!r}: {part!r} is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {item!r}: the value is not valid YAML ({_yaml_problem(err)})") from err


def from_dict(cls, raw: Dict[str, Any], prefix: str):
    """Build dataclass ``cls`` from ``raw``, validating every key (errors name ``prefix.key``)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = prefix or "top level"
        raise ConfigError(f"unknown key(s) {[_join(prefix, k) for k in unknown]} at {where}; "
                          f"allowed: {sorted(fields)}")
    values = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        key = _join(prefix, name)
        if dataclasses.is_dataclass(hints[name]):
            values[name] = from_dict(hints[name], raw[name], key)
        else:
            values[name] = _check_value(key, raw[name], hints[name], f.metadata)
    return cls(**values)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _check_value(key: str, value: Any, hint, meta) -> Any:
    value = _coerce(key, value, hint)
    if value is None:
        return value
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(f"{key}: {value!r} is not one of {list(meta['choices'])}")
    for bound, ok in (("ge", lambda v, b: v >= b), ("gt", lambda v, b: v > b), ("le", lambda v, b: v <= b)):
        b = meta.get(bound)
        if b is not None and isinstance(value, (int, float)) and not ok(value, b):
            symbol = {"ge": ">=", "gt": ">", "le": "<="}[bound]
            raise ConfigError(f"{key}: must be {symbol} {b}, got {value}")
    return value


def _coerce(key: str, value: Any, hint) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, option)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: {value!r} fits none of the allowed types ({'; '.join(errors)})")
    if origin in (list, List):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # PyYAML reads 1e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if hint is Any:
        return value
    raise ConfigError(f"{key}: unsupported type {hint}")  # pragma: no cover - schema bug
