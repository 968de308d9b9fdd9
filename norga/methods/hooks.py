"""The declared hook points of the methods: what code outside a method may observe or replace, by name.

The cross-checks against reference code (``crosscheck/``) and the speed report need to see inside a method's
training: time its stages, record the head a stage creates, skip a tuning stage, exchange a stage's initial tensors
with the reference's. They do it through these points, never by patching a method's private functions, so a
refactor that keeps a point keeps its checks working and one that drops it fails their tests.

One process-wide :data:`HOOKS` (also ``Method.hooks``), because the engine builds the method a check observes.
Every registration is a context manager and is undone on exit; with nothing registered a hook point does nothing
(no random draw, no synchronisation), so a run's numbers do not depend on it.

Points (``POINTS``):

* ``first_task_tuning`` (replace): APER's and RanPAC's first-session tuning,
  :func:`~norga.methods.adapter_stage.tune_first_task` ``(name, model, tuned, classes, num_classes, loader, opts,
  device, lr_key) -> history``;
* ``adapter_training`` (replace): the adapter stage's training of tuning parameters with a fresh cosine head,
  :func:`~norga.methods.adapter_stage.train_with_cosine_head` ``(name, task, features, tuned, classes, num_classes,
  loader, opts, dim, device, train_modules, lr_key) -> history`` (EASE's every task; APER's and RanPAC's first
  session inside ``first_task_tuning``);
* ``head_created`` (observe): ``(head)``, every cosine head the adapter stage creates
  (:func:`~norga.methods.adapter_stage.train_with_cosine_head`), right after its initial values are drawn and
  before it is used;
* ``adapter_drawn`` (observe): ``(method, task, adapter)``, TUNA's new task adapter (an ``nn.ModuleList``, one
  module per block) right before it is trained, its head at ``method.heads[task]``;
* ``task_started`` (observe): ``(method, task)``, HiDe-LoRA's and SD-LoRA's new task branch right after
  ``start_task`` added it (its initial factors are in ``method.wrappers``), before any step;
* ``alignment_samples`` (observe): ``(features, labels, generator)``, SLCA's sampled features (N, D) and labels
  (N,) of one alignment epoch, right before ``generator`` shuffles them into batches (an observer that needs the
  order must draw it from a copy of the generator's state);
* stages (:meth:`MethodHooks.stage`): ``tii``, ``wtp``, ``tap`` (HiDe-Prompt's and HiDe-LoRA's stages),
  ``statistics`` (un-augmented feature passes), ``diagnostics``, ``evaluation`` (:meth:`Method.predict`).
"""
from __future__ import annotations

import functools
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Callable, ContextManager, Dict, Iterator, List

POINTS = {"first_task_tuning": "replace", "adapter_training": "replace", "head_created": "observe",
          "adapter_drawn": "observe", "alignment_samples": "observe", "task_started": "observe"}
STAGES = ("tii", "wtp", "tap", "statistics", "diagnostics", "evaluation")


class MethodHooks:
    """The registry behind :data:`HOOKS`: replacements and observers per point, and stage watchers."""

    def __init__(self):
        self._replacements: Dict[str, Callable] = {}
        self._observers: Dict[str, List[Callable]] = {point: [] for point, kind in POINTS.items()
                                                      if kind == "observe"}
        self._stage_watchers: List[Callable[[str], ContextManager]] = []

    @staticmethod
    def _check(point: str, kind: str) -> None:
        if POINTS.get(point) != kind:
            declared = ", ".join(f"{p} ({k})" for p, k in POINTS.items())
            raise ValueError(f"{point!r} is not a hook point that can be {kind}d; declared: {declared}")

    @contextmanager
    def replaced(self, point: str, replacement: Callable) -> Iterator[None]:
        """Within ``with``: the part at ``point`` runs ``replacement`` (same arguments, same return) instead."""
        self._check(point, "replace")
        if point in self._replacements:
            raise ValueError(f"{point!r} is already replaced")
        self._replacements[point] = replacement
        try:
            yield
        finally:
            del self._replacements[point]

    @contextmanager
    def observed(self, point: str, observer: Callable) -> Iterator[None]:
        """Within ``with``: ``observer`` is called with the point's arguments each time the point is reached."""
        self._check(point, "observe")
        self._observers[point].append(observer)
        try:
            yield
        finally:
            self._observers[point].remove(observer)

    @contextmanager
    def watching_stages(self, watcher: Callable[[str], ContextManager]) -> Iterator[None]:
        """Within ``with``: every stage runs inside ``watcher(stage name)`` (e.g. a timer's context manager)."""
        self._stage_watchers.append(watcher)
        try:
            yield
        finally:
            self._stage_watchers.remove(watcher)

    def replacement(self, point: str):
        """The callable registered for ``point`` (a method calls it instead of its own part), or None."""
        return self._replacements.get(point)

    def notify(self, point: str, *args) -> None:
        """Call the observers of ``point`` with ``args`` (a method calls this where the point is)."""
        for observer in list(self._observers[point]):
            observer(*args)

    def stage(self, name: str) -> ContextManager:
        """The context a method runs stage ``name`` (one of ``STAGES``) in: the watchers' contexts, nested."""
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}; one of {STAGES}")
        return self._watched(name) if self._stage_watchers else nullcontext()

    @contextmanager
    def _watched(self, name: str) -> Iterator[None]:
        with ExitStack() as stack:
            for watcher in list(self._stage_watchers):
                stack.enter_context(watcher(name))
            yield


HOOKS = MethodHooks()


def hooked_stage(name: str) -> Callable[[Callable], Callable]:
    """Decorator: the function runs as stage ``name`` (:meth:`MethodHooks.stage` of :data:`HOOKS`)."""
    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def run(*args, **kwargs):
            with HOOKS.stage(name):
                return function(*args, **kwargs)
        return run
    return decorate
