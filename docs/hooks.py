"""MkDocs hooks of the docs site (``mkdocs.yml``: ``hooks: [docs/hooks.py]``).

* The configs page's ``<!-- config-reference -->`` marker becomes the reference generated from the config
  dataclasses (:mod:`norga.commands.config_reference`), so the published reference is the code's.
* The changelog page shows the repository's ``CHANGELOG.md``.
* The benchmark figures committed under ``bench/results/`` are served at ``bench-results/<name>.png``, so
  the pages show the figures the benchmark scripts wrote, never a copy; a study's figures
  (``studies/<study>/<name>.png``) likewise at ``study-figures/<study>/<name>.png``.
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- config-reference -->"
CHANGELOG = "<!-- changelog -->"


def on_files(files, config):
    for figure in sorted((REPO / "bench" / "results").glob("*.png")):
        files.append(File.generated(config, f"bench-results/{figure.name}", abs_src_path=str(figure)))
    for figure in sorted((REPO / "studies").glob("*/*.png")):
        files.append(File.generated(config, f"study-figures/{figure.parent.name}/{figure.name}",
                                    abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        from norga.commands.config_reference import reference

        markdown = markdown.replace(MARKER, reference())
    if CHANGELOG in markdown:  # CHANGELOG.md lives at the repository root; the site shows it without a copy
        markdown = markdown.replace(CHANGELOG, (REPO / "CHANGELOG.md").read_text().split("\n", 1)[1])
    return markdown
