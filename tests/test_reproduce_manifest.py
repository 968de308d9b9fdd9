"""The reproduction manifest (configs/reproduce/*.yaml): its published cells, their transcription and protocols,
and the selection errors of ``norga reproduce``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from norga.reproduce.manifest import ManifestError, load_manifest, parse_shard, select

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "configs" / "reproduce" / "paper.yaml"
QUICK = REPO / "configs" / "reproduce" / "quick_gpu.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


# ---- the manifest -------------------------------------------------------------------------------------------
def test_manifest_has_every_published_cell():
    m = load_manifest(PAPER)
    t1, t2 = select(m, table=1), select(m, table=2)
    assert len(t1) == 2 * 5 * 6 and len(t2) == 2 * 2 * 6  # benchmarks x backbones x methods
    assert all(set(c.published) == {"FA", "CA", "FM"} and all(s is not None for _, s in c.published.values())
               for c in t1)
    assert all(set(c.published) == {"FA"} and c.published["FA"][1] is None for c in t2)
    paper = [c for c in m.cells if c.protocol == "norga_paper"]
    assert all(c.seeds == (42, 40, 44) and c.source.startswith(f"Table {c.table}, row ") for c in paper)
    assert all(c.seeds == (1993,) and c.table == 3 for c in m.cells if c.protocol.startswith("pilot_"))
    assert all(c.seeds == (1993, 1996, 1997) and c.table == 3 for c in m.cells if c.protocol == "slca_official")
    not_runnable = [c for c in m.cells if not c.runnable]
    assert len(not_runnable) == 16 and all(c.missing and c.table == 2 for c in not_runnable)
    assert {c.method for c in not_runnable} == {"l2p", "dualprompt", "sprompt", "coda"}


@pytest.mark.parametrize("cell_id, metric, value", [
    ("t1-cifar100-sup21k-norga", "FA", (94.48, 0.13)), ("t1-cifar100-sup21k-hideprompt", "CA", (94.03, 0.01)),
    ("t1-cifar100-ibot21k-coda", "FM", (7.50, 0.25)), ("t1-cifar100-ibot21k-norga", "FA", (94.76, 0.15)),
    ("t1-imagenet_r-ibot21k-hideprompt", "FM", (6.77, 0.23)), ("t1-imagenet_r-moco1k-coda", "FM", (10.46, 0.04)),
    ("t1-imagenet_r-dino1k-norga", "CA", (75.76, 0.49)), ("t1-cifar100-ibot1k-l2p", "FA", (75.51, 0.88)),
    ("t2-cub200-sup21k-norga", "FA", (90.90, None)), ("t2-five_datasets-ibot21k-coda", "FA", (51.65, None)),
    ("t3-cifar100-augreg_in21k-mos", "FA", (89.25, None)), ("t3-imagenet_r-augreg_in21k-mos", "FA", (77.83, None)),
    ("t3-cifar100-sup21k-slca", "FA", (91.53, None)), ("t3-imagenet_r-sup21k-slca", "FA", (77.00, None)),
])
def test_transcription_spot_checks(cell_id, metric, value):
    cells = {c.id: c for c in load_manifest(PAPER).cells}
    assert cells[cell_id].published[metric] == value


def test_newer_methods_cells_carry_their_own_protocol():
    """Table 3: a newer method's own published last accuracy, one seed (PILOT's 1993), under a protocol of its own."""
    cells = {c.id: c for c in select(load_manifest(PAPER), table=3)}
    assert cells["t3-cifar100-augreg_in21k-tuna"].published == {"FA": (91.60, None)}
    assert cells["t3-imagenet_r-augreg_in21k-tuna"].published == {"FA": (79.30, None)}
    pilot = [c for c in cells.values() if c.protocol.startswith("pilot_")]
    assert {c.method for c in pilot} == {"mos", "tuna"} and all(c.seeds == (1993,) for c in pilot)
    slca = [c for c in cells.values() if c.method == "slca"]
    assert len(slca) == 2 and all(c.protocol == "slca_official" and c.seeds == (1993, 1996, 1997) for c in slca)
    # every table-3 protocol orders classes as PyCIL does (np.random.seed(seed); permutation)
    assert all("data.class_order_rng=numpy" in c.overrides for c in cells.values())


def test_every_entry_config_loads_without_torch():
    """Each runnable entry's config with its overrides and every seed validates, in a process without torch."""
    code = ("import sys; from norga.reproduce.manifest import load_manifest; from norga.config import load_config\n"
            f"for path in {[str(PAPER), str(QUICK)]!r}:\n"
            "    for c in load_manifest(path).cells:\n"
            "        for s in c.seeds if c.runnable else ():\n"
            "            cfg = load_config(c.config_path, c.run_overrides(s))\n"
            "            assert cfg.seed == s and cfg.model.preset == c.backbone, c.id\n"
            "            assert cfg.method.name == {'sprompt': 'dualprompt'}.get(c.method, c.method), c.id\n"
            "assert 'torch' not in sys.modules\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_selection_errors_name_the_valid_choices():
    m = load_manifest(PAPER)
    with pytest.raises(ManifestError, match="unknown row 'sup22k'; valid: dino1k, ibot1k, ibot21k, moco1k, sup21k"):
        select(m, table=1, rows=["sup22k"])
    with pytest.raises(ManifestError, match="unknown table 4; valid: 1, 2, 3"):
        select(m, table=4)
    with pytest.raises(ManifestError, match="--only: 'nogra' matches no method.*norga"):
        select(m, only=["nogra"])
    with pytest.raises(ManifestError, match="needs 0 <= i < n"):
        parse_shard("4/4")
    assert [c.id for c in select(m, table=1, rows=["sup21k"], only=["norga", "t1-imagenet_r-*-l2p"])] == [
        "t1-cifar100-sup21k-norga", "t1-imagenet_r-sup21k-l2p", "t1-imagenet_r-sup21k-norga"]
    shards = [select(m, table=1, shard=(i, 3)) for i in range(3)]
    ids = [c.id for shard in shards for c in shard]
    assert sorted(ids) == sorted(c.id for c in select(m, table=1)) and len(ids) == len(set(ids))


def test_the_shipped_manifest_names_its_protocol():
    m = load_manifest(PAPER)
    assert {c.protocol for c in m.cells} == set(m.protocols) and "norga_paper" in m.protocols
    assert {c.protocol for c in m.cells if c.table in (1, 2)} == {"norga_paper"}
