"""Writing a study's generated report, or checking that the committed one is current (``--check``)."""
from __future__ import annotations

import sys
from pathlib import Path

from norga.files import atomic_write_bytes


def write_or_check(path: Path, text: str, check: bool) -> int:
    """With ``check``: 0 when ``path`` holds ``text``, else 1 with one line naming the file and the command that
    rewrites it. Without: write ``text`` to ``path`` atomically; 0."""
    if check:
        current = path.read_text() if path.is_file() else None
        if current == text:
            return 0
        print(f"{path}: {'missing' if current is None else 'differs from its rows'}; rerun its generator without "
              "--check (the study's README names it)", file=sys.stderr)
        return 1
    atomic_write_bytes(path, text.encode())
    return 0
