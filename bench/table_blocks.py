"""The registry and renderer of generated Markdown tables (used by ``bench/readme_tables.py``).

A generated table sits between two HTML comments (invisible on GitHub)::

    <!-- bench:moe-arms -->
    | arm | seeds | ... |
    <!-- /bench:moe-arms -->

Each name is a registered block (``BLOCKS``, filled with ``@block(name, arms)``): a function of the rows of
``bench/results/evidence_cpu.json`` (a :class:`Results`, whose statistics are computed once per render)
returning table lines, or ``[]`` when it has no rows yet; the page then says what to run (``BLOCK_MISSING`` or
the block's arms).

A block named ``file:PATH`` (a path from the repository root, e.g. ``file:studies/schedule_cut/schedule_cut.md``)
is that committed, generated file (without its ``# `` title line), so a page can show a report its own generator
writes and checks (a study's ``--check``) without this package importing the generator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Dict, List

from bench import real_data_cpu
from bench.regimes import REPO


@dataclass
class Results:
    """The benchmark rows; ``stats`` is real_data_cpu.statistics() of the evidence regime, computed on first use."""

    rows: List[dict]

    @cached_property
    def stats(self) -> dict:
        return real_data_cpu.statistics(self.rows, real_data_cpu.REGIMES["evidence"])


BLOCKS: Dict[str, Callable[[Results], List[str]]] = {}
BLOCK_ARMS: Dict[str, List[str]] = {}  # the arms each table needs (named when it has no rows yet)
BLOCK_MISSING: Dict[str, str] = {}  # what to run when a table that does not read the evidence rows has no rows
MARKER = re.compile(r"<!-- bench:([\w./:-]+) -->\n(.*?)<!-- /bench:([\w./:-]+) -->", re.S)
FILE_BLOCK = "file:"  # a block that shows a committed generated file (see the module docstring)


def block(name: str, arms: List[str]):
    """Register a table: ``@block("name", arms)`` on a function Results -> table lines (empty without rows)."""
    def register(fn):
        BLOCKS[name], BLOCK_ARMS[name] = fn, arms
        return fn
    return register


def typographic(line: str) -> str:
    """ASCII minus before a digit -> "−", unless it follows a digit or a word of two letters or more (table rules,
    dates such as 2026-11-27 and names such as CIFAR-100 or top-1 are left alone; T-1 is a difference)."""
    return re.sub(r"(?<!\d)(?<![A-Za-z][A-Za-z])-(?=\d)", "−", line)


def file_lines(name: str) -> List[str]:
    """The lines of the file a ``file:PATH`` block shows, without a leading ``# `` title and the blank lines after
    it; a missing file is one clear error naming it."""
    path = REPO / name[len(FILE_BLOCK):]
    if not path.is_file():
        raise ValueError(f"block {name!r}: {path} does not exist; run the generator that writes it, or fix the path")
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
        while lines and not lines[0].strip():
            lines = lines[1:]
    return lines


def render_block(name: str, results: Results) -> str:
    if name.startswith(FILE_BLOCK):
        return "\n".join(typographic(ln) for ln in file_lines(name)) + "\n"
    lines = [typographic(ln) for ln in BLOCKS[name](results)]
    how = BLOCK_MISSING.get(name) or f"run `python -m bench.real_data_cpu --only {' '.join(BLOCK_ARMS[name])}`"
    missing = f"*No rows yet for `{name}`: {how}.*"
    return "\n".join(lines or [missing]) + "\n"


def render(text: str, rows: List[dict]) -> str:
    """``text`` with every marked block regenerated from ``rows``; unknown or mismatched markers raise."""
    unknown = sorted({m.group(1) for m in MARKER.finditer(text) if not m.group(1).startswith(FILE_BLOCK)} - set(BLOCKS))
    if unknown:
        raise ValueError(f"README marks unknown table(s) {unknown}; registered: {sorted(BLOCKS)}")
    opened, closed = re.findall(r"<!-- bench:([\w./:-]+) -->", text), re.findall(r"<!-- /bench:([\w./:-]+) -->", text)
    mismatched = [m.group(1) for m in MARKER.finditer(text) if m.group(1) != m.group(3)]
    if opened != closed or mismatched:
        raise ValueError(f"README table markers do not pair up (opened {opened}, closed {closed}): each "
                         "<!-- bench:NAME --> needs its own <!-- /bench:NAME --> after it")
    results = Results(rows)
    return MARKER.sub(lambda m: f"<!-- bench:{m.group(1)} -->\n{render_block(m.group(1), results)}"
                                f"<!-- /bench:{m.group(1)} -->", text)


def stale_blocks(text: str, rows: List[dict]) -> List[str]:
    """Names of the marked blocks whose text differs from what the rows give."""
    fresh = {m.group(1): m.group(2) for m in MARKER.finditer(render(text, rows))}
    return [m.group(1) for m in MARKER.finditer(text) if fresh[m.group(1)] != m.group(2)]
