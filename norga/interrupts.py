"""SIGTERM handled as Ctrl-C: :func:`sigterm_as_interrupt` makes SIGTERM raise ``KeyboardInterrupt`` inside a block,
so that one stop path serves both signals (a scheduler, ``kill`` or preemption sends SIGTERM; a terminal sends
SIGINT). Used by the error boundary of every command (:func:`norga.commands.guard.guarded`) and by the local
launcher (:func:`norga.sweep.launchers.launch_local`), which must stop the commands it started whether its caller
is a norga command or a user's script calling the library. Standard library only."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[bool]:
    """Within the block SIGTERM raises ``KeyboardInterrupt`` in the main thread; the previous handler is back after
    it. Yields whether the handler was installed: only the main thread can install one, elsewhere SIGTERM is left
    as it is."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        previous = None
        installed = False
    else:
        installed = True
    try:
        yield installed
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
