"""Typed run configuration: dataclasses loaded from YAML, strict validation.

``load_config(path, overrides=["method.wtp.epochs=3", ...])`` returns a :class:`Config`.
Unknown keys, wrong types and out-of-range values raise :class:`ConfigError`
naming the key path (e.g. ``method.wtp.lr``). Booleans accept only true/false.

The run's own sections live here (``data``, ``model`` = the backbone, ``logging``);
``method`` is the section of the method named by ``method.name``, a dataclass
registered by that method in a torch-free module (:mod:`norga.methods`). A file
may start from another with ``base: other.yaml`` (:func:`read_config_file`).
Keys of the 0.1 layout raise an error naming their new place (:data:`MOVED_KEYS`).
Every field is in the docs' configs page (generated from these dataclasses by
:mod:`norga.commands.config_reference`).

Modules: :mod:`.fields` (ConfigError, the field helper), :mod:`.registry` (method config sections by name),
:mod:`.schema` (the dataclasses), :mod:`.parsing` (validation), :mod:`.loading` (files, includes, overrides),
:mod:`.shipped` (the configs installed with norga, by name: ``load_config("smoke")``; ``norga configs``).
"""
from .fields import SCHEDULE_STEPPINGS, ConfigError, _f, stepping_field
from .loading import load_config, merge_configs, read_config_file
from .parsing import config_to_dict, from_dict
from .registry import (METHOD_CONFIGS, METHOD_MODULES, METHODS_PACKAGE, method_config, method_config_class,
                       method_configs, same_options, shared_sections)
from .schema import (AMP_MODES, COMPILE_MODES, DEFAULT_METHOD, MOVED_KEYS, Config, DataConfig, LoggingConfig,
                     MethodConfig, ModelConfig)

__all__ = ["ConfigError", "_f", "load_config", "merge_configs", "read_config_file", "config_to_dict", "from_dict",
           "SCHEDULE_STEPPINGS", "stepping_field",
           "METHOD_CONFIGS", "METHOD_MODULES", "METHODS_PACKAGE", "method_config", "method_config_class",
           "method_configs", "same_options", "shared_sections", "AMP_MODES", "COMPILE_MODES", "DEFAULT_METHOD",
           "MOVED_KEYS", "Config",
           "DataConfig", "LoggingConfig", "MethodConfig", "ModelConfig"]
