"""Class-incremental benchmarks (registry), class order, task splits, transforms."""
from . import preparers  # noqa: F401 - registers the shipped `norga data prepare` preparers
from .benchmark import BENCHMARKS, Benchmark, build_benchmark, resolve_class_order, split_tasks
from .sources import DataError, RawData, register_source
from .transforms import build_transforms

__all__ = ["BENCHMARKS", "Benchmark", "DataError", "RawData", "build_benchmark", "build_transforms",
           "register_source", "resolve_class_order", "split_tasks"]
