"""An emulated second device on the CPU (issue #68): a run configured for ``device=cpu`` is given the marker device
:data:`VIRTUAL` (``torch.device("cpu", 0)``: it computes on the CPU but compares unequal to ``torch.device("cpu")``)
and :class:`DeviceTracker` treats the tensors made for it as living on another device than the host's.

What is a *device* tensor (tracked by storage, so views, ``param.data = ...`` and in-place ops keep the tag):

* the output of a factory call or ``_to_copy`` whose ``device=`` is :data:`VIRTUAL` (``torch.zeros(.., device=d)``,
  ``x.to(d)``, ``module.to(d)``), of ``torch.tensor`` / ``torch.as_tensor`` with ``device=d``;
* a fresh output of an op with a device tensor among its inputs and no ``device=`` of its own;
* everything else (the loaders' batches, ``torch.zeros(n)``, ``torch.load``) is a *host* tensor; ``x.cpu()`` and
  ``x.to("cpu")`` of a device tensor copy it to the host, as on a GPU.

``x.device`` reports :data:`VIRTUAL` for a device tensor, so ``torch.zeros(n, device=x.device)`` and
``x.to(y.device)`` mean what they mean on a GPU. A ``torch.Generator(device=d)`` is a device generator.

What is a violation (recorded with the innermost norga frames; :meth:`DeviceTracker.assert_clean` fails on any):

* ``mix``: an op with a device tensor and a host tensor of one dimension or more among its inputs (0-dim host
  tensors are allowed, as CUDA allows CPU scalars); ``copy_`` and ``_to_copy`` are transfers, and host indices
  into a device tensor (``dev[host_index]``, ``dev[host_index] = v``) are allowed, as CUDA allows them;
* ``generator``: a random op writing a device tensor with a generator that is not a device generator;
* ``numpy``: ``.numpy()`` (so also ``np.asarray``) of a device tensor.
"""
from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

VIRTUAL = torch.device("cpu", 0)  # the emulated device: CPU memory, unequal to torch.device("cpu")
HOST = torch.device("cpu")
NORGA_DIR = str(Path(__file__).resolve().parents[1] / "norga")
TESTS_DIR = str(Path(__file__).resolve().parent)
aten = torch.ops.aten
TRANSFERS = {aten._to_copy.default, aten.copy_.default, aten.lift_fresh.default, aten.lift_fresh_copy.default}
INDEXING = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default}
# Python-level factories: a factory op on the host reached through one of them is a host tensor; one reached
# otherwise comes from inside C++ (``at::zeros(.., x.options())`` of one_hot, of a backward) and is neutral
PY_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.linspace, torch.logspace,
                torch.eye, torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal, torch.empty_strided}
PRUNE_EVERY = 20_000  # marks between sweeps of the dead storages out of the tag table

_BASE_DEVICE = torch._C.TensorBase.device  # the real property (getset descriptor)
_ORIGINAL = {name: getattr(torch.Tensor, name) for name in ("to", "cpu", "numpy")}
_OWN = {name for name in ("device", *_ORIGINAL) if name in vars(torch.Tensor)}  # defined by torch.Tensor itself
_TORCH_ORIGINAL = {name: getattr(torch, name) for name in ("tensor", "as_tensor", "Generator")}


@dataclass(frozen=True)
class Violation:
    """One placement error: its ``kind`` (mix, generator, numpy), the op, and where (innermost norga frames)."""

    kind: str
    op: str
    where: str

    def line(self) -> str:
        return f"{self.kind}: {self.op} at {self.where}"


def _storage_key(t: torch.Tensor) -> Optional[int]:
    """The id of the tensor's storage (None for a tensor without one, e.g. sparse)."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def _is_virtual(device) -> bool:
    return device is not None and torch.device(device) == VIRTUAL


def _call_site() -> str:
    """The innermost frames in norga (or, failing that, in the tests) of the current stack."""
    stack = list(reversed(traceback.StackSummary.extract(traceback.walk_stack(None), lookup_lines=False)))
    frames = [f for f in stack if f.filename.startswith(NORGA_DIR)]
    if not frames:
        frames = [f for f in stack if f.filename.startswith(TESTS_DIR) and not f.filename.endswith("device_tracker.py")]
    return " <- ".join(f"{Path(f.filename).relative_to(Path(NORGA_DIR).parent)}:{f.lineno} {f.name}"
                       for f in reversed(frames[-2:])) or "?"


class DeviceTracker(TorchDispatchMode):
    """The dispatch mode and Python patches of the emulated device; use ``with DeviceTracker() as tracker:``.

    Violations are recorded (deduplicated by kind, op and place) rather than raised, so one run lists them all;
    ``raise_at_once=True`` raises an AssertionError at the first (a traceback to the culprit)."""

    def __init__(self, raise_at_once: bool = False):
        super().__init__()
        self.raise_at_once = raise_at_once
        self._tags: dict = {}  # storage _cdata -> StorageWeakRef of a device storage
        self._neutral: dict = {}  # the same for storages made inside C++ with the host's options (see PY_FACTORIES)
        self.python_factory = 0  # depth of Python-level factory calls (:class:`_FactoryCalls`)
        self._generators: dict = {}  # generator _cdata -> the device generator (kept alive: its id stays unique)
        self._marks = 0
        self.violations: List[Violation] = []
        self.counts: dict = {}

    # ---- the tag table -------------------------------------------------
    def is_device(self, t: torch.Tensor) -> bool:
        key = _storage_key(t)
        ref = self._tags.get(key) if key is not None else None
        return ref is not None and not ref.expired()

    @property
    def marked_any(self) -> bool:
        """Whether any tensor was placed on the emulated device."""
        return self._marks > 0

    def is_neutral(self, t: torch.Tensor) -> bool:
        ref = self._neutral.get(_storage_key(t))
        return ref is not None and not ref.expired()

    def mark(self, t: torch.Tensor, table: Optional[dict] = None) -> None:
        """Tag ``t``'s storage as a device storage (or in ``table``, e.g. the neutral one)."""
        key, table = _storage_key(t), self._tags if table is None else table
        if key is not None:
            self._neutral.pop(key, None)
            table[key] = StorageWeakRef(t.untyped_storage())
            self._marks += 1
            if self._marks % PRUNE_EVERY == 0:
                self._tags = {k: r for k, r in self._tags.items() if not r.expired()}
                self._neutral = {k: r for k, r in self._neutral.items() if not r.expired()}

    def unmark(self, t: torch.Tensor) -> None:
        self._tags.pop(_storage_key(t), None)

    def report(self, kind: str, op: str) -> None:
        """Record a violation of ``kind`` by ``op`` at the current norga call site."""
        found = Violation(kind, op, _call_site())
        self.counts[found] = self.counts.get(found, 0) + 1
        if self.counts[found] == 1:
            self.violations.append(found)
        if self.raise_at_once:
            raise AssertionError(f"device placement: {found.line()}")

    def of_kind(self, kind: str) -> List[Violation]:
        return [v for v in self.violations if v.kind == kind]

    def assert_clean(self) -> None:
        """Fail listing every violation (each once, with how often it happened)."""
        if self.violations:
            lines = "\n".join(f"  {v.line()} (x{self.counts[v]})" for v in self.violations)
            raise AssertionError(f"{len(self.violations)} device-placement violation(s):\n{lines}")

    # ---- the dispatch mode ---------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._check_mixing(func, args, kwargs)
        out = func(*args, **kwargs)
        leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        inputs = {_storage_key(t) for t in leaves}
        outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        where = self._placement(func, kwargs, leaves)
        if where == "device" and leaves and self.is_neutral(leaves[0]):  # a neutral tensor written from the device
            self.mark(leaves[0])
        if where != "host":
            for t in outputs:
                if _storage_key(t) not in inputs:  # fresh storage (views and in-place results keep their tag)
                    self.mark(t, None if where == "device" else self._neutral)
        self._check_generator(func, kwargs, outputs)
        return out

    def _placement(self, func, kwargs, leaves) -> str:
        """Where the op's fresh outputs live: by its ``device=`` when it has one (a host factory reached from inside
        C++, e.g. ``new_zeros(.., grad.options())``, is ``neutral``; ``_to_copy`` to the host is a transfer), else
        ``device`` with any device input, ``neutral`` with neutral inputs and no host one, else ``host``."""
        if kwargs.get("device") is not None:
            if _is_virtual(kwargs["device"]):
                return "device"
            return "host" if self.python_factory or func is aten._to_copy.default else "neutral"
        if any(self.is_device(t) for t in leaves):
            return "device"
        if any(self.is_neutral(t) for t in leaves) and all(self.is_neutral(t) or t.dim() == 0 for t in leaves):
            return "neutral"
        return "host"

    def _check_mixing(self, func, args, kwargs) -> None:
        if func in TRANSFERS:
            return
        leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func in INDEXING and args and self.is_device(args[0]):  # host indices into a device tensor: allowed
            skipped = {id(t) for t in pytree.tree_leaves(args[1]) if isinstance(t, torch.Tensor)}
            leaves = [t for t in leaves if id(t) not in skipped]
        on_device = [self.is_device(t) for t in leaves]
        if any(on_device) and any(not d and t.dim() > 0 and not self.is_neutral(t) for t, d in zip(leaves, on_device)):
            self.report("mix", str(func))

    def _check_generator(self, func, kwargs, outputs) -> None:
        generator = kwargs.get("generator")
        if generator is None or generator._cdata in self._generators:
            return
        if any(self.is_device(t) for t in outputs):
            self.report("generator", str(func))

    # ---- the Python-level patches ----------------------------------------
    def __enter__(self):
        self._patches = contextlib.ExitStack()
        self._patches.enter_context(_patched(self))
        self._patches.enter_context(_FactoryCalls(self))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._patches.close()

    def device_of(self, t: torch.Tensor) -> torch.device:
        """What ``t.device`` reports under the tracker."""
        return VIRTUAL if self.is_device(t) else _BASE_DEVICE.__get__(t)

    def to(self, t: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """``Tensor.to`` on the emulated device: host -> device copies (tagged), device -> host copies (untagged),
        device -> device keeps the tensor (or a device copy when the dtype changes), as on a GPU."""
        if args and isinstance(args[0], torch.Tensor):  # to(other): other's (emulated) device and dtype
            args = (self.device_of(args[0]), args[0].dtype, *args[1:])
        copy = kwargs.pop("copy", False)
        target, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        options = dict(dtype=dtype, non_blocking=non_blocking, copy=copy,
                       memory_format=memory_format or torch.preserve_format)
        on_device = self.is_device(t)
        if target is None or (on_device and _is_virtual(target)):  # stays where it is
            return _ORIGINAL["to"](t, device=None, **options)
        if not on_device:  # host -> device (a copy: cpu:0 is not cpu) or host -> host
            return _ORIGINAL["to"](t, device=target, **options)
        out = _ORIGINAL["to"](t, device=HOST, **{**options, "copy": True})  # device -> host: always a copy
        self.unmark(out)
        return out


def _device_tensor(tracker: DeviceTracker, make):
    """``torch.tensor`` / ``torch.as_tensor`` whose result is tagged when ``device=`` is the emulated device."""

    def factory(data, *args, **kwargs):
        if _is_virtual(kwargs.get("device")):
            if isinstance(data, torch.Tensor) and make is _TORCH_ORIGINAL["as_tensor"]:  # may alias: a transfer
                return tracker.to(data, VIRTUAL, dtype=kwargs.get("dtype") or data.dtype)
            out = make(data, *args, **{**kwargs, "device": HOST})  # a fresh tensor
            tracker.mark(out)
            return out
        return make(data, *args, **kwargs)

    return factory


class _GeneratorMeta(type(torch._C.Generator)):
    def __instancecheck__(cls, obj):  # every generator stays a torch.Generator while the patch is on
        return isinstance(obj, torch._C.Generator)


def _generator_class(tracker: DeviceTracker):
    """``torch.Generator`` that records the generators made for the emulated device."""

    class Generator(torch._C.Generator, metaclass=_GeneratorMeta):
        def __init__(self, device="cpu"):
            super().__init__()
            if _is_virtual(device):
                tracker._generators[self._cdata] = self

        @property
        def device(self):
            return VIRTUAL if self._cdata in tracker._generators else torch._C.Generator.device.__get__(self)

    return Generator


class _FactoryCalls(TorchFunctionMode):
    """Counts the Python-level factory calls in progress (host factories under them are host tensors)."""

    def __init__(self, tracker: DeviceTracker):
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func not in PY_FACTORIES:
            return func(*args, **(kwargs or {}))
        self.tracker.python_factory += 1
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.tracker.python_factory -= 1


def _numpy_guard(tracker: DeviceTracker):
    def numpy(t, *args, **kwargs):
        if tracker.is_device(t):
            tracker.report("numpy", "Tensor.numpy")
        return _ORIGINAL["numpy"](t, *args, **kwargs)

    return numpy


@contextlib.contextmanager
def _patched(tracker: DeviceTracker) -> Iterator[None]:
    """``Tensor.device/.to/.cpu/.numpy``, ``torch.tensor/as_tensor/Generator`` emulating the device, undone after."""
    torch.Tensor.device = property(tracker.device_of)
    torch.Tensor.to = lambda t, *a, **k: tracker.to(t, *a, **k)
    torch.Tensor.cpu = lambda t, *a, **k: tracker.to(t, HOST, *a, **k)
    torch.Tensor.numpy = _numpy_guard(tracker)
    torch.tensor = _device_tensor(tracker, _TORCH_ORIGINAL["tensor"])
    torch.as_tensor = _device_tensor(tracker, _TORCH_ORIGINAL["as_tensor"])
    torch.Generator = _generator_class(tracker)
    try:
        yield
    finally:
        for name in ("device", *_ORIGINAL):
            if name in _OWN:
                setattr(torch.Tensor, name, _ORIGINAL.get(name, _BASE_DEVICE))
            else:
                delattr(torch.Tensor, name)
        for name, value in _TORCH_ORIGINAL.items():
            setattr(torch, name, value)
