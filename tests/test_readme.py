"""The README and the docs site say what the code does: examples run, the reference covers every key, the
generated tables match the committed rows, the README stays a front page and every page is in the site."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 250


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


def test_the_readme_is_a_front_page_and_its_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md is the front page: move reference text to docs/"
    for target in re.findall(r"\]\(((?!https?://)[^)#]+)\)", text):
        assert (REPO / target).exists(), f"README links to a missing file: {target}"
    for command in ("make demo", "make test"):
        assert command in text and command.split()[1] + ":" in (REPO / "Makefile").read_text()


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
    from norga.models.gates import GATES

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
    bench/readme_tables.py makes of the rows."""
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
    assert found == set(BLOCKS)


def test_the_stated_gap_of_the_baselines_to_no_prompt_is_the_committed_one():
    """"The baselines end A–B FA points below `no_prompt`" (README, docs/crosscheck.md): A and B are the smallest
    and largest paired FA gap of the four prompt baselines in the committed rows, rounded."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import real_data_cpu
    from bench.row_merge import load_rows

    rows = load_rows(REPO / "bench" / "results" / "evidence_cpu")
    pairs = real_data_cpu.statistics(rows, real_data_cpu.REGIMES["evidence"])["pairs"]
    gaps = [-pairs[f"{arm} − no_prompt"]["FA"][1].mean for arm in ("sprompt", "l2p", "dualprompt", "coda")]
    stated = f"baselines end {round(min(gaps))}–{round(max(gaps))} FA points below `no_prompt`"
    for page in (REPO / "README.md", DOCS / "crosscheck.md"):
        assert stated in page.read_text().replace("\n", " "), f"{page.name} should say: {stated}"



# The signs of (arm − reference) that a method page's prose states: 1 above, 0 level, −1 below (95% interval).
STATED_SIGNS = {
    ("sd_lora", "no_prompt"): {"TIL_FA": 1, "FA": -1, "FM": 1},
    ("sd_lora", "norga_tanh"): {"TIL_FA": 1, "FA": -1, "FM": 1},
    ("inflora", "no_prompt"): {"TIL_FA": 0, "FA": -1, "FM": 1},
}
STATED_IN = {"sd_lora": "Given the task, SD-LoRA's features are better",
             "inflora": "given the task it\nis level with `no_prompt`"}


@pytest.mark.parametrize("arm, reference", sorted(STATED_SIGNS))
def test_a_method_page_states_what_its_paired_rows_show(arm, reference):
    """docs/methods/<arm>.md's sentence on the arm against ``reference`` matches the committed rows' intervals."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import real_data_cpu
    from bench.row_merge import load_rows
    from norga.reports.summary_stats import sign_of

    rows = load_rows(REPO / "bench" / "results" / "evidence_cpu")
    pair = real_data_cpu.statistics(rows, real_data_cpu.REGIMES["evidence"])["pairs"][f"{arm} − {reference}"]
    signs = {m: sign_of(pair[m][1]) for m in STATED_SIGNS[arm, reference]}
    assert signs == STATED_SIGNS[arm, reference], f"{arm} − {reference}: {signs}; update docs/methods/{arm}.md"
    assert STATED_IN[arm] in (DOCS / "methods" / f"{arm}.md").read_text()


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
