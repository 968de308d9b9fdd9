"""The docs site's copies of the cross-check READMEs: crosscheck/<folder>/README.md -> docs/crosscheck/<folder>.md.

    python -m crosscheck.harness.pages            # write every copy
    python -m crosscheck.harness.pages --check    # exit 1, naming the stale copies

A README is the evidence of its folder and is read on GitHub beside the code; the docs site (MkDocs, ``docs/`` only)
shows the same text with its relative links rewritten for the page's place: ``../../docs/X`` -> ``../X`` and
``../<folder>/README.md`` -> ``<folder>.md``. The README's generated tables (``python -m bench.readme_tables``) are
copied as they are, so render them first. ``tests/test_crosscheck_pages.py`` runs the check.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "crosscheck"
PAGES = REPO / "docs" / "crosscheck"
NOTE = "<!-- generated from crosscheck/{folder}/README.md by `python -m crosscheck.harness.pages`: edit the README -->"


def readmes() -> List[Path]:
    """Every folder README under crosscheck/ (method folders, harness, speed), sorted by folder name."""
    return sorted(SOURCE.glob("*/README.md"))


def site_text(readme: Path) -> str:
    """The docs page of ``readme``: its title line, the generated-from note, then its text with links rewritten."""
    title, _, body = readme.read_text().partition("\n")
    body = body.replace("](../../docs/", "](../")
    body = re.sub(r"\]\(\.\./(\w+)/README\.md", r"](\1.md", body)
    return f"{title}\n\n{NOTE.format(folder=readme.parent.name)}\n{body}"


def expected() -> Dict[Path, str]:
    """docs/crosscheck/<folder>.md -> the text it must hold."""
    return {PAGES / f"{readme.parent.name}.md": site_text(readme) for readme in readmes()}


def stale() -> List[str]:
    """The copies that differ from their README, are missing, or have no README any more."""
    want = expected()
    wrong = [str(path.relative_to(REPO)) for path, text in want.items()
             if not path.is_file() or path.read_text() != text]
    orphans = [str(path.relative_to(REPO)) for path in sorted(PAGES.glob("*.md")) if path not in want]
    return wrong + orphans


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="only check; exit 1 naming the stale copies")
    args = p.parse_args(argv)
    if args.check:
        bad = stale()
        for name in bad:
            print(f"{name} differs from its README: run python -m crosscheck.harness.pages", file=sys.stderr)
        return 1 if bad else 0
    PAGES.mkdir(parents=True, exist_ok=True)
    for path, text in expected().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
