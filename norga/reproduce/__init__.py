"""``norga reproduce``: the paper's tables from a manifest of published cells (docs/reproduce.md).

:mod:`.manifest` (cells, selection; torch-free), :mod:`.runner` (runs per cell and seed, resumable),
:mod:`.estimate` (time and memory estimates), :mod:`.report` (ours vs published), :mod:`.quick` (the GPU
check's per-stage timings), :mod:`.cli` (the command).
"""
from .manifest import Cell, Manifest, ManifestError, load_manifest, select

__all__ = ["Cell", "Manifest", "ManifestError", "load_manifest", "select"]
