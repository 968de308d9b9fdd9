"""A process-wide run setting (e.g. the amp or compile mode) that a block sets and restores."""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence


class ModeSwitch:
    """``value`` is ``default`` until :meth:`use` sets one of ``choices`` for the enclosed block."""

    def __init__(self, what: str, choices: Sequence[str], default: str):
        self.what, self.choices, self.value = what, tuple(choices), default

    @contextlib.contextmanager
    def use(self, mode: str) -> Iterator[None]:
        """Run the enclosed code with ``mode`` (restored afterwards, also on errors)."""
        if mode not in self.choices:
            raise ValueError(f"unknown {self.what} mode {mode!r}; choose one of {list(self.choices)}")
        previous, self.value = self.value, mode
        try:
            yield
        finally:
            self.value = previous
