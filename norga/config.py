"""Typed run configuration: dataclasses loaded from YAML, strict validation.

``load_config(path, overrides=["method.wtp.epochs=3", ...])`` returns a :class:`Config`.
Unknown keys, wrong types and out-of-range values raise :class:`ConfigError`
naming the key path (e.g. ``method.wtp.lr``). Booleans accept only true/false.

The run's own sections live here (``data``, ``model`` = the backbone, ``logging``);
``method`` is the section of the method named by ``method.name``, a dataclass
registered by that method in a torch-free module (:mod:`norga.methods`). A file
may start from another with ``base: other.yaml`` (:func:`read_config_file`).
Keys of the 0.1 layout raise an error naming their new place (:data:`MOVED_KEYS`).
See README "Config reference" for every field.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

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


@dataclass
class ModelConfig:
    """The frozen backbone (what prompts and gates attach to is the method's business: ``method.*``)."""

    preset: Optional[str] = _f(None)  # a backbone preset (`norga list`), e.g. sup21k: ViT-B/16 ImageNet-21K
    name: Optional[str] = _f(None)  # timm model name; overrides the preset's
    # a local checkpoint file for the backbone (timm / safetensors / the presets' formats)
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
        if self.amp is False:
            self.amp = "off"
        if self.amp not in AMP_MODES:
            raise ConfigError(f"amp: {self.amp!r} is not one of {list(AMP_MODES)}")
        if isinstance(self.compile, bool):
            self.compile = "default" if self.compile else "off"
        if self.compile not in COMPILE_MODES:
            raise ConfigError(f"compile: {self.compile!r} is not one of {list(COMPILE_MODES)} (or true / false)")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(self.device)):
            raise ConfigError(f"device: expected auto, cpu, cuda or cuda:K (K = a GPU index), got {self.device!r}")


# Keys of the norga 0.1/0.2 layout -> where they live now (an old config gets an error naming the new key).
MOVED_KEYS = {
    "tii": "method.tii", "wtp": "method.wtp", "tap": "method.tap", "stats": "method.stats",
    "head_init": "method.head_init", "scale_lr_by_batch": "method.scale_lr_by_batch",
    "model.prompt_layers": "method.prompt_layers", "model.prompt_length": "method.prompt_length",
    "model.gate": "method.gate.name", "model.activation": "method.gate.activation",
}


# The registry of method config sections. It lives here, below the methods, so that reading a config never
# imports a method; the torch-free ``norga/methods/*_config.py`` modules register into it with
# :func:`method_config` when the package ``norga.methods`` is imported, which happens by name (plugin
# discovery) the first time a method section is needed.
METHOD_CONFIGS: Dict[str, type] = {}  # name -> config dataclass
METHOD_MODULES: Dict[str, str] = {}  # name -> module that registers the implementation
METHODS_PACKAGE = "norga.methods"


def method_config(name: str, module: str):
    """Class decorator: register a method's config dataclass and the module of its implementation."""

    def wrap(cls: type) -> type:
        if name in METHOD_CONFIGS:
            raise ValueError(f"method config {name!r} is already registered")
        METHOD_CONFIGS[name] = cls
        METHOD_MODULES[name] = module
        return cls

    return wrap


def method_configs() -> Dict[str, type]:
    """Every registered method config section, by name (imports the torch-free ``*_config`` modules once)."""
    importlib.import_module(METHODS_PACKAGE)
    return METHOD_CONFIGS


def method_config_class(name: str) -> type:
    """The config dataclass registered for method ``name``."""
    known = method_configs()
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"method.name: unknown method {name!r}; choose one of {sorted(known)} "
                          "('norga list' describes them)")
    return known[name]


def load_config(path: Optional[Union[str, Path]] = None, overrides: Optional[List[str]] = None) -> Config:
    """Read YAML (or start from defaults), resolve ``base:`` includes, apply ``key.path=value`` overrides, validate."""
    raw: Dict[str, Any] = {} if path is None else read_config_file(Path(path))
    for item in overrides or []:
        _apply_override(raw, item)
    return from_dict(Config, raw, "")


def read_config_file(path: Path, _including: Tuple[Path, ...] = ()) -> Dict[str, Any]:
    """A config file's mapping with its ``base:`` chain merged in (the file's own values win).

    ``base: other.yaml`` (a path relative to the file) names a config this one
    starts from: mappings merge key by key, every other value (lists too) is
    replaced. A section naming another ``name`` than the base's (another method,
    another gate) replaces the base's section whole: its keys belong to the other one.
    """
    raw = _read_yaml_file(path)
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base must be the path of another config file, got {base!r}")
    base_path = (path.parent / base).resolve()
    chain = _including + (path.resolve(),)
    if base_path in chain:
        raise ConfigError(f"{path}: base {base!r} includes itself ({' -> '.join(str(p) for p in chain + (base_path,))})")
    if not base_path.is_file():
        raise ConfigError(f"{path}: base config not found: {base_path} (base paths are relative to the file)")
    return merge_configs(read_config_file(base_path, chain), raw)


def merge_configs(base: Dict[str, Any], own: Dict[str, Any]) -> Dict[str, Any]:
    """``own`` on top of ``base`` (see :func:`read_config_file`); neither argument is modified."""
    merged = dict(base)
    for key, value in own.items():
        old = merged.get(key)
        renamed = isinstance(old, dict) and isinstance(value, dict) and value.get("name", old.get("name")) != \
            old.get("name") and not (key == "method" and same_options(old.get("name"), value.get("name")))
        # another method or gate: the base's options belong to the other one (unless the two methods share them)
        if isinstance(old, dict) and isinstance(value, dict) and not renamed:
            merged[key] = merge_configs(old, value)
        else:
            merged[key] = value
    return merged


def same_options(a: Any, b: Any) -> bool:
    """Whether registered methods ``a`` and ``b`` read the same options (one's config section extends the other's, e.g.
    ``norga`` and ``hideprompt``): a child config may then switch between them and keep its base's values."""
    known = method_configs()
    if not (isinstance(a, str) and isinstance(b, str) and a in known and b in known):
        return False
    return issubclass(known[a], known[b]) or issubclass(known[b], known[a])


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
    """Build dataclass ``cls`` from ``raw``, validating every key (errors name ``prefix.key``).

    A field with ``metadata["method"]`` is a method section: its dataclass is the
    one registered for ``raw[field]["name"]``.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
    _refuse_moved_keys(raw, prefix)
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
        if f.metadata.get("method"):
            section = raw[name] if raw[name] is not None else {}
            chosen = section.get("name", DEFAULT_METHOD) if isinstance(section, dict) else None
            values[name] = from_dict(method_config_class(chosen), section, key)
        elif dataclasses.is_dataclass(hints[name]):
            values[name] = from_dict(hints[name], raw[name], key)
        else:
            values[name] = _check_value(key, raw[name], hints[name], f.metadata)
    return cls(**values)


def _refuse_moved_keys(raw: Dict[str, Any], prefix: str) -> None:
    """An old-layout key is an error naming its new place (never silently reinterpreted)."""
    for name in raw:
        key = _join(prefix, name)
        if key in MOVED_KEYS:
            raise ConfigError(f"{key} moved to {MOVED_KEYS[key]} (norga 0.2 config layout: everything a method "
                              f"owns lives under method:); write it as {MOVED_KEYS[key]}, see README 'Config "
                              "reference'")


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
