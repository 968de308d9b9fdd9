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
