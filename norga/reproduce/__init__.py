"""``norga reproduce``: the paper's tables from a manifest of published cells (docs/reproduce.md).

:mod:`.manifest` (cells, selection; torch-free), :mod:`.runner` (runs per cell and seed, resumable),
:mod:`.estimate` (time and memory estimates), :mod:`.report` (ours vs published), :mod:`.quick` (the GPU
check's per-stage timings). The command itself is :mod:`norga.commands.reproduce_command`, above this layer:
nothing here imports :mod:`norga.commands`.
"""
from .manifest import Cell, Manifest, ManifestError, load_manifest, select

__all__ = ["Cell", "Manifest", "ManifestError", "load_manifest", "select"]
