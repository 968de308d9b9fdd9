"""The cross-check READMEs and their docs pages: docs/crosscheck/<folder>.md is crosscheck/<folder>/README.md with
its links rewritten for the site (``python -m crosscheck.harness.pages --check``), the READMEs' generated tables are
fresh, docs/crosscheck.md stays an index, and nothing in the package, the benchmarks or the studies imports the
cross-checks (they sit above them)."""
from __future__ import annotations

import ast
from pathlib import Path

from crosscheck.harness import pages

REPO = Path(__file__).resolve().parents[1]
INDEX_MAX_LINES = 200


def test_every_docs_copy_matches_its_readme():
    assert len(pages.readmes()) >= 14, "a crosscheck folder lost its README"
    assert pages.stale() == [], "run python -m crosscheck.harness.pages"


def test_a_changed_readme_makes_its_copy_stale(tmp_path, monkeypatch):
    source, site = tmp_path / "crosscheck", tmp_path / "docs"
    (source / "coda").mkdir(parents=True)
    (source / "coda" / "README.md").write_text("# CODA\n\nSee [the method](../../docs/methods/coda.md) and "
                                               "[APER](../aper/README.md#repeat-it).\n")
    monkeypatch.setattr(pages, "SOURCE", source)
    monkeypatch.setattr(pages, "PAGES", site)
    monkeypatch.setattr(pages, "REPO", tmp_path)
    assert pages.stale() == ["docs/coda.md"]
    assert pages.main([]) == 0
    text = (site / "coda.md").read_text()
    assert "](../methods/coda.md)" in text and "](aper.md#repeat-it)" in text and "README" in text
    assert pages.stale() == [] and pages.main(["--check"]) == 0
    (source / "coda" / "README.md").write_text("# CODA\n\nchanged\n")
    assert pages.main(["--check"]) == 1
    (site / "orphan.md").write_text("# gone\n")
    assert "docs/orphan.md" in pages.stale()


def test_the_readmes_tables_are_generated_and_fresh():
    from bench import readme_tables
    from bench.row_merge import load_rows

    readmes = [p for p in readme_tables.pages() if p.name == "README.md" and p.parent.parent.name == "crosscheck"]
    assert len(readmes) >= 14
    rows = load_rows(REPO / "bench" / "results" / "evidence_cpu")
    marked = [p for p in readmes if readme_tables.MARKER.search(p.read_text())]
    assert marked, "no crosscheck README carries a generated table"
    for path in marked:
        assert readme_tables.stale_blocks(path.read_text(), rows) == [], f"{path}: run python -m bench.readme_tables"


def test_the_crosscheck_page_is_an_index():
    text = (REPO / "docs" / "crosscheck.md").read_text()
    assert len(text.splitlines()) <= INDEX_MAX_LINES, "docs/crosscheck.md is the index: move detail to a README"
    for readme in pages.readmes():
        assert f"(crosscheck/{readme.parent.name}.md)" in text, f"the index does not link {readme.parent.name}"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_nothing_below_imports_the_crosschecks():
    offenders = [str(p.relative_to(REPO)) for top in ("norga", "bench", "studies", "theory")
                 for p in sorted((REPO / top).rglob("*.py"))
                 if any(name.split(".")[0] == "crosscheck" for name in _imports(p))]
    assert not offenders, f"these import crosscheck, which sits above them: {offenders}"
