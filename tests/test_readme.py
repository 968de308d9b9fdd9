"""The README and the docs site say what the code does: examples run, the reference covers every key, the
generated tables match the committed rows (``python -m bench.readme_tables --check``), the README stays a front
page and every page is in the site."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT as REPO

DOCS = REPO / "docs"
README_MAX_LINES = 150
RESULTS_MAX_LINES = 250  # docs/results.md: the overview; each newer arm's full tables live on docs/newer-arms.md


def python_blocks(path: Path, section: str = "") -> list:
    text = path.read_text()
    if section:
        text = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def run_blocks(blocks, tmp_path, monkeypatch, name: str) -> dict:
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, name, "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace


@pytest.mark.integration
def test_the_readme_example_runs(tmp_path, monkeypatch):
    blocks = python_blocks(REPO / "README.md", "Python example")
    assert len(blocks) == 1 and len(blocks[0].strip().splitlines()) <= 12
    namespace = run_blocks(blocks, tmp_path, monkeypatch, "README.md")
    assert namespace["metrics"]["method"]["gate"] == {"name": "linear"}


@pytest.mark.integration
def test_python_api_page_examples_run(tmp_path, monkeypatch):
    blocks = python_blocks(DOCS / "python-api.md")
    assert len(blocks) >= 4
    namespace = run_blocks(blocks, tmp_path, monkeypatch, "docs/python-api.md")
    assert namespace["again"]["acc_matrix"] == namespace["metrics"]["acc_matrix"]
    assert namespace["metrics"]["method"]["gate"] == {"name": "linear"}
    assert tuple(namespace["features"].shape) == (4, 64)


def test_the_results_page_stays_an_overview():
    lines = (DOCS / "results.md").read_text().splitlines()
    assert len(lines) <= RESULTS_MAX_LINES, "docs/results.md: move an arm's detail to docs/newer-arms.md or its page"


def test_the_readme_is_a_front_page_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md is the front page: move reference text to docs/"
    for target in re.findall(r"\]\(((?!https?://)[^)#]+)\)", text):
        assert (REPO / target).exists(), f"README links to a missing file: {target}"
    for command in ("make demo", "make test"):
        assert command in text and command.split()[1] + ":" in (REPO / "Makefile").read_text()
    ci_commands = [line.split("#")[0].split() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert ["make", "test", 'VENV="$venv"'] in ci_commands, ".ci/run must call the README's test command (make test)"


def _nav_pages(nav) -> list:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_docs_page_is_in_the_site_navigation():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav, f"pages without a nav entry: {sorted(pages - nav)}; nav entries without a page: " \
                         f"{sorted(nav - pages)}"


def test_the_generated_config_reference_covers_every_key_with_help():
    from norga.config import Config, method_configs
    from norga.commands.config_reference import reference, rows
    from norga.gates.modules import GATES

    text = reference()
    for name, cls in method_configs().items():
        section = text.split(f"## `method.name: {name}`\n", 1)[1].split("\n## ", 1)[0]
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "name"]
        missing = [f for f in fields if not re.search(rf"\| `{f}(\.\w+)?` \|", section)]
        assert not missing, f"the reference of method {name} lacks {missing}"
    keys = {row[0] for row in rows(Config)}
    assert {"seed", "data.num_tasks", "model.checkpoint", "logging.tensorboard"} <= keys
    for gate in GATES.values():
        assert f"name: {gate.name}" in text
    every = [*rows(Config)] + [r for cls in method_configs().values() for r in rows(cls, skip=("name",))] + \
            [r for gate in GATES.values() for r in rows(gate.Options)]
    without_help = sorted({r[0] for r in every if not r[4].strip()})
    assert not without_help, f"config fields without help (add a comment on the field's line): {without_help}"


def test_the_config_reference_reads_help_from_comments_and_metadata():
    from norga.commands.config_reference import field_help

    @dataclasses.dataclass
    class Example:
        plain: int = 1  # on the line
        # above the field,
        # on two lines
        above: int = 2
        given: int = dataclasses.field(default=3, metadata={"help": "from metadata"})  # not this
        bare: int = 4

    helps = field_help(Example)
    assert (helps["plain"], helps["above"], helps["given"]) == ("on the line", "above the field, on two lines",
                                                                "from metadata")
    assert not helps.get("bare")  # and the coverage test above names such a field


def test_benchmark_tables_match_the_committed_rows():
    """Every table between <!-- bench:NAME --> markers, in the README or a docs page, is what
    bench/readme_tables.py makes of the rows (or, for a ``file:PATH`` block, the committed file); every registered
    block is on some page. (``python -m bench.readme_tables --check``; a study's report is checked against its
    rows by its own generator's ``--check``, in ``python -m pytest studies``.)"""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import readme_tables
    from bench.row_merge import load_rows
    from bench.table_blocks import BLOCKS

    rows = load_rows(REPO / "bench" / "results" / "evidence_cpu")
    found = set()
    for page in readme_tables.pages():
        text = page.read_text()
        found |= {m.group(1) for m in readme_tables.MARKER.finditer(text)}
        stale = readme_tables.stale_blocks(text, rows)
        assert not stale, f"{page}: tables {stale} are stale: run python -m bench.readme_tables"
    assert {name for name in found if not name.startswith("file:")} == set(BLOCKS)


@pytest.mark.integration
def test_the_site_builds_strictly(tmp_path):
    """What .ci/run does: broken links, missing pages or a failing generator fail the build."""
    pytest.importorskip("mkdocs", reason="the docs tools come with the dev extra: pip install -e '.[dev]'")
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            **__import__("os").environ})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "method.name: norga" in (tmp_path / "site" / "configs" / "index.html").read_text()
