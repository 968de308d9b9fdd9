"""The README's Python API examples run as written (in a scratch folder with the shipped configs)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def python_blocks(section: str) -> list:
    text = (REPO / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_python_api_examples_run(tmp_path, monkeypatch):
    blocks = python_blocks("Python API")
    assert len(blocks) >= 4
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["again"]["acc_matrix"] == namespace["metrics"]["acc_matrix"]
    assert namespace["metrics"]["method"]["gate"] == {"name": "linear"}
    assert tuple(namespace["features"].shape) == (4, 64)


def test_config_reference_lists_every_field_of_every_method():
    """README "Config reference": each registered method has a section naming each of its config keys."""
    import dataclasses

    from norga.methods import METHOD_CONFIGS

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name, cls in METHOD_CONFIGS.items():
        match = re.search(rf"\*\*`method\.name: {name}`\*\*(.*?)(?=\n\*\*`method\.name: |\n## )", text, re.S)
        assert match, f"README has no **`method.name: {name}`** section"
        missing = [f.name for f in dataclasses.fields(cls) if f.name != "name" and f"`{f.name}" not in match.group(1)]
        assert not missing, f"README section of method {name} lacks {missing}"


def test_benchmark_tables_match_the_committed_rows():
    """Every table between <!-- bench:NAME --> markers is what bench/readme_tables.py makes of the rows."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench import readme_tables
    from bench.real_data_cpu import load_rows

    text = (REPO / "README.md").read_text()
    assert {m.group(1) for m in readme_tables.MARKER.finditer(text)} == set(readme_tables.BLOCKS)
    stale = readme_tables.stale_blocks(text, load_rows(REPO / "bench" / "results" / "evidence_cpu"))
    assert not stale, f"README tables {stale} are stale: run python bench/readme_tables.py"
