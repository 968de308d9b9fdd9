"""The reproduction manifest: one entry per published cell (the shipped ``reproduce/paper``), torch-free.

    m = load_manifest(manifest_file(None))      # the shipped reproduce/paper (a FILE or a shipped name otherwise)
    cells = select(m, table=1, rows=["sup21k"], only=["norga"], shard=(0, 2))
    for cell in cells: cell.config_path, cell.run_overrides(seed=42)

A cell names a benchmark, a method, a backbone row (``model.preset``), its seeds, the shipped config it runs
(``config`` + ``overrides``), the published numbers (``published: {FA: [mean, std]}``, in %, std ``null`` where
the paper prints none) and their ``source``. ``config: null`` with ``missing: why`` is a published cell that
cannot be run. A manifest may hold cells of several protocols (task split, class order, seeds, backbone, metric:
``protocols: {name: {label: ...}}``, a default ``protocol:`` at the top, a cell's own ``protocol:``); the report
puts each protocol in its own table, so no number is compared across protocols. The quick GPU check's manifest
gives ``expected: {FA: [low, high]}`` ranges instead. Every mistake in a manifest raises :class:`ManifestError`
naming the entry and the key. A shipped manifest's ``config`` names a shipped config; another manifest's is a file
relative to its folder or one of its parents, else a shipped config's name.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from ..config.shipped import is_shipped, name_of, shipped_path
from ..errors import NorgaError

METRICS = ("FA", "CA", "FM")  # the paper's metrics, in % (FM in percentage points)
DEFAULT_MANIFEST = Path("configs") / "reproduce" / "paper.yaml"  # the files in the repository
QUICK_MANIFEST = Path("configs") / "reproduce" / "quick_gpu.yaml"
DEFAULT_NAME, QUICK_NAME = name_of(str(DEFAULT_MANIFEST)), name_of(str(QUICK_MANIFEST))  # their shipped names


class ManifestError(NorgaError):
    """A manifest or a selection that cannot be used (the message names the entry and the key)."""


@dataclass(frozen=True)
class Cell:
    """One published cell: what runs (config + overrides, per seed) and what it is compared with."""
    id: str
    table: int
    benchmark: str
    backbone: str
    method: str
    seeds: Tuple[int, ...]
    config_path: Optional[Path]  # resolved; None when not runnable
    overrides: Tuple[str, ...] = ()
    published: Dict[str, Tuple[float, Optional[float]]] = field(default_factory=dict)  # metric -> (mean, std) in %
    expected: Dict[str, Tuple[float, float]] = field(default_factory=dict)  # metric -> (low, high) in %
    source: str = ""
    missing: Optional[str] = None
    note: Optional[str] = None
    protocol: str = ""  # a key of the manifest's ``protocols`` ("" when the manifest defines none)
    protocol_label: str = ""

    @property
    def runnable(self) -> bool:
        return self.config_path is not None

    def run_overrides(self, seed: int, extra: Sequence[str] = ()) -> List[str]:
        """The ``--set`` list of the run of ``seed``: the cell's overrides, the seed, then ``extra``."""
        return [*self.overrides, f"seed={seed}", *extra]


@dataclass(frozen=True)
class Manifest:
    path: Path
    paper: str
    cells: Tuple[Cell, ...]
    benchmarks: Dict[str, dict]
    backbones: Dict[str, dict]
    methods: Dict[str, str]
    tables: Dict[int, str]
    protocols: Dict[str, dict] = field(default_factory=dict)  # name -> {label: ..., ...}


def manifest_file(given: Optional[str], quick: bool = False) -> Path:
    """The manifest to read: ``given`` if it is an existing file, else the shipped manifest so named; without
    ``given`` the shipped ``reproduce/paper`` (``reproduce/quick_gpu`` when ``quick``)."""
    name = given if given is not None else (QUICK_NAME if quick else DEFAULT_NAME)
    if given is not None and Path(given).is_file():
        return Path(given)
    path = shipped_path(name)
    if path is None:
        raise ManifestError(f"manifest not found: {name} (neither a file nor a shipped manifest such as "
                            f"{DEFAULT_NAME}; norga configs lists the shipped ones)")
    return path


def _find_config(manifest: Path, name: str) -> Optional[Path]:
    """A shipped manifest's ``name`` among the shipped configs; another manifest's relative to its folder or to
    one of its parents (so ``configs/x.yaml`` works), else a shipped config's name."""
    if is_shipped(manifest):
        return shipped_path(name)
    candidate = Path(name)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for folder in (manifest.parent, *manifest.parent.parents):
        if (folder / candidate).is_file():
            return (folder / candidate).resolve()
    return shipped_path(name)


def _pairs(entry_id: str, key: str, value, allow_null_second: bool) -> Dict[str, tuple]:
    """``{FA: [a, b], ...}`` checked: metric names from METRICS, two numbers (the second may be null)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(f"cell {entry_id}: {key} must be a mapping like {{FA: [94.48, 0.13]}}, got {value!r}")
    out = {}
    for metric, pair in value.items():
        if metric not in METRICS:
            raise ManifestError(f"cell {entry_id}: {key}.{metric}: unknown metric; choose from {list(METRICS)}")
        ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (int, float)) and (
            isinstance(pair[1], (int, float)) or (allow_null_second and pair[1] is None))
        if not ok:
            raise ManifestError(f"cell {entry_id}: {key}.{metric} must be [number, number], got {pair!r}")
        out[metric] = (float(pair[0]), None if pair[1] is None else float(pair[1]))
    return out


def _protocols(path: Path, raw: dict) -> Tuple[Dict[str, dict], str]:
    """The manifest's ``protocols`` (each a mapping with a ``label``) and its default ``protocol`` name."""
    protocols = raw.get("protocols") or {}
    if not isinstance(protocols, dict) or not all(isinstance(v, dict) and v.get("label") for v in protocols.values()):
        raise ManifestError(f"{path}: protocols must map each name to a mapping with a label, e.g. "
                            "{pilot_10x10: {label: \"10 tasks of 10 classes, seed 1993\"}}")
    default = str(raw.get("protocol") or "")
    if default and default not in protocols:
        raise ManifestError(f"{path}: protocol {default!r} is not under protocols: (defined: {sorted(protocols)})")
    return protocols, default


def _cell_protocol(path: Path, entry_id: str, raw: dict, protocols: Dict[str, dict], default: str) -> str:
    name = str(raw.get("protocol") or default)
    if protocols and not name:
        raise ManifestError(f"{path}: cell {entry_id}: missing key 'protocol' (one of {sorted(protocols)}; or a "
                            "default protocol: at the top)")
    if name and name not in protocols:
        raise ManifestError(f"{path}: cell {entry_id}: unknown protocol {name!r}; "
                            + (f"the manifest defines {sorted(protocols)}" if protocols
                               else "define it under protocols: {NAME: {label: ...}}"))
    return name


def _cell(path: Path, raw: dict, default_seeds: Sequence[int], known: Dict[str, dict],
          protocols: Dict[str, dict], default_protocol: str) -> Cell:
    """One ``cells:`` entry, checked against the manifest's benchmarks, backbones and methods."""
    entry_id = raw.get("id") or "?"
    for key in ("id", "table", "benchmark", "backbone", "method"):
        if raw.get(key) in (None, ""):
            raise ManifestError(f"{path}: cell {entry_id}: missing key {key!r}")
    for key, names in known.items():
        if names and raw[key] not in names:
            raise ManifestError(f"{path}: cell {entry_id}: unknown {key} {raw[key]!r}; "
                                f"the manifest lists {sorted(names)}")
    config_path = None
    if raw.get("config") is None:
        if not raw.get("missing"):
            raise ManifestError(f"{path}: cell {entry_id}: config is null, so say why in missing: \"...\"")
    else:
        config_path = _find_config(path, str(raw["config"]))
        if config_path is None:
            raise ManifestError(f"{path}: cell {entry_id}: config {raw['config']!r} not found (relative to the "
                                "manifest's folder or one of its parents, nor a shipped config's name)")
    protocol = _cell_protocol(path, entry_id, raw, protocols, default_protocol)
    seeds = raw.get("seeds", default_seeds)
    if not seeds or not all(isinstance(s, int) for s in seeds):
        raise ManifestError(f"{path}: cell {entry_id}: seeds must be a non-empty list of integers, got {seeds!r}")
    return Cell(id=str(raw["id"]), table=int(raw["table"]), benchmark=raw["benchmark"], backbone=raw["backbone"],
                method=raw["method"], seeds=tuple(seeds), config_path=config_path,
                overrides=tuple(str(o) for o in raw.get("overrides") or ()),
                published=_pairs(entry_id, "published", raw.get("published"), True),
                expected=_pairs(entry_id, "expected", raw.get("expected"), False),
                source=str(raw.get("source", "")), missing=raw.get("missing"), note=raw.get("note"),
                protocol=protocol, protocol_label=str(protocols[protocol]["label"]) if protocol else "")


def load_manifest(path) -> Manifest:
    """Read and check a manifest file (see the module docstring); raises :class:`ManifestError`."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"manifest not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ManifestError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from err
    if not isinstance(raw.get("cells"), list) or not raw["cells"]:
        raise ManifestError(f"{path}: needs a non-empty list under cells:")
    known = {"benchmark": raw.get("benchmarks") or {}, "backbone": raw.get("backbones") or {},
             "method": raw.get("methods") or {}}
    protocols, default_protocol = _protocols(path, raw)
    cells = tuple(_cell(path, c, raw.get("seeds") or [42], known, protocols, default_protocol) for c in raw["cells"])
    duplicates = sorted({c.id for c in cells if sum(d.id == c.id for d in cells) > 1})
    if duplicates:
        raise ManifestError(f"{path}: cell ids must be unique; repeated: {', '.join(duplicates)}")
    return Manifest(path=path, paper=str(raw.get("paper", "")), cells=cells, benchmarks=known["benchmark"],
                    backbones=known["backbone"], methods=known["method"],
                    tables={int(k): str(v) for k, v in (raw.get("tables") or {}).items()}, protocols=protocols)


def parse_shard(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """``"i/n"`` -> (i, n) with 0 <= i < n (shard i of n, 0-based); None stays None."""
    if text is None:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ManifestError(f"--shard: expected i/n with integers, e.g. 0/4, got {text!r}") from None
    if not 0 <= i < n:
        raise ManifestError(f"--shard {text}: needs 0 <= i < n (shards are numbered from 0)")
    return i, n


def _check_names(kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    unknown = [g for g in given if g not in valid]
    if unknown:
        raise ManifestError(f"unknown {kind} {', '.join(map(repr, unknown))}; valid: {', '.join(map(str, valid))}")


def select(manifest: Manifest, table: Optional[int] = None, rows: Sequence[str] = (), only: Sequence[str] = (),
           shard: Optional[Tuple[int, int]] = None, protocols: Sequence[str] = ()) -> List[Cell]:
    """The cells of ``table`` on the backbone ``rows`` under the named ``protocols``, restricted by ``only``
    (method names, benchmark names or cell-id patterns such as ``t1-cifar100-*``), then shard i of n (every n-th
    cell from i, in manifest order)."""
    cells = list(manifest.cells)
    if protocols:
        _check_names("protocol", protocols, sorted({c.protocol for c in cells}))
        cells = [c for c in cells if c.protocol in protocols]
    if table is not None:
        _check_names("table", [table], sorted({c.table for c in cells}))
        cells = [c for c in cells if c.table == table]
    if rows:
        _check_names("row", rows, sorted({c.backbone for c in cells}))
        cells = [c for c in cells if c.backbone in rows]
    if only:
        names = {c.method for c in manifest.cells} | {c.benchmark for c in manifest.cells}
        bad = [o for o in only if o not in names and not any(fnmatch.fnmatch(c.id, o) for c in manifest.cells)]
        if bad:
            raise ManifestError(f"--only: {', '.join(map(repr, bad))} matches no method, benchmark or cell id; "
                                f"methods: {', '.join(sorted({c.method for c in manifest.cells}))}; benchmarks: "
                                f"{', '.join(sorted({c.benchmark for c in manifest.cells}))}; or a cell id pattern")
        cells = [c for c in cells if any(o in (c.method, c.benchmark) or fnmatch.fnmatch(c.id, o) for o in only)]
    if shard is not None:
        cells = cells[shard[0]::shard[1]]
    return cells
