"""Run several checks and report every problem they find at once, instead of one problem per attempt.

    found = Problems()
    vit = found.attempt(lambda: build_vit(cfg))          # None if it raised a user error
    bench = found.attempt(lambda: build_data(cfg, arch))
    found.raise_any()                                    # one problem: its own error; several: one listing all

Only problems the user can fix (:class:`norga.errors.NorgaError`, :class:`norga.config.ConfigError`) are
collected; anything else is a bug and propagates at once. Imports nothing heavy.
"""
from __future__ import annotations

from typing import Callable, List, Optional, TypeVar

from ..config import ConfigError
from ..errors import NorgaError, one_line

T = TypeVar("T")


class Problems:
    """The user errors raised by the checks run through :meth:`attempt`, in order."""

    def __init__(self) -> None:
        self.errors: List[Exception] = []

    def attempt(self, check: Callable[[], T]) -> Optional[T]:
        """``check()``, or None after recording the user error it raised."""
        try:
            return check()
        except (NorgaError, ConfigError) as err:
            self.errors.append(err)
            return None

    def add(self, error: Exception) -> None:
        self.errors.append(error)

    def raise_any(self, context: str = "") -> None:
        """Nothing when no check failed; one failure: its own error; several: one NorgaError listing all
        (``context`` names what found them, e.g. "the dry run")."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            listed = "; ".join(f"({i}) {one_line(str(e))}" for i, e in enumerate(self.errors, 1))
            raise NorgaError(f"{context + ' found ' if context else ''}{len(self.errors)} problems: {listed}")
