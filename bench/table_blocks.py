"""The registry and renderer of generated Markdown tables (used by ``bench/readme_tables.py``).

A generated table sits between two HTML comments (invisible on GitHub)::

    <!-- bench:moe-arms -->
    | arm | seeds | ... |
    <!-- /bench:moe-arms -->

Each name is a registered block (``BLOCKS``, filled with ``@block(name, arms)``): a function of the rows of
``bench/results/evidence_cpu.json`` (a :class:`Results`, whose statistics are computed once per render)
returning table lines, or ``[]`` when it has no rows yet; the page then says what to run (``BLOCK_MISSING`` or
the block's arms).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Dict, List

from bench import real_data_cpu
from norga.reports.summary_stats import Estimate, difference_text


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
MARKER = re.compile(r"<!-- bench:([\w-]+) -->\n(.*?)<!-- /bench:([\w-]+) -->", re.S)


def block(name: str, arms: List[str]):
    """Register a table: ``@block("name", arms)`` on a function Results -> table lines (empty without rows)."""
    def register(fn):
        BLOCKS[name], BLOCK_ARMS[name] = fn, arms
        return fn
    return register


def typographic(line: str) -> str:
    """ASCII minus before a digit -> "−", unless it follows a digit (table rules, names and dates such as
    2026-11-27 are left alone)."""
    return re.sub(r"(?<!\d)-(?=\d)", "−", line)


def prose_interval(e: Estimate) -> str:
    """An estimate as the docs' prose quotes it: ``difference_text`` without the resolved marker, with the
    typographic minus (e.g. "−1.96 [−6.08, +2.16]")."""
    return typographic(difference_text(e, mark_resolved=False))


def render_block(name: str, results: Results) -> str:
    lines = [typographic(ln) for ln in BLOCKS[name](results)]
    how = BLOCK_MISSING.get(name) or f"run `python -m bench.real_data_cpu --only {' '.join(BLOCK_ARMS[name])}`"
    missing = f"*No rows yet for `{name}`: {how}.*"
    return "\n".join(lines or [missing]) + "\n"


def render(text: str, rows: List[dict]) -> str:
    """``text`` with every marked block regenerated from ``rows``; unknown or mismatched markers raise."""
    unknown = sorted({m.group(1) for m in MARKER.finditer(text)} - set(BLOCKS))
    if unknown:
        raise ValueError(f"README marks unknown table(s) {unknown}; registered: {sorted(BLOCKS)}")
    opened, closed = re.findall(r"<!-- bench:([\w-]+) -->", text), re.findall(r"<!-- /bench:([\w-]+) -->", text)
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
