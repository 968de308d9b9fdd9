"""ImageNet-A, ObjectNet, OmniBenchmark and VTAB: the PTM papers' pre-split ImageFolder trees, read, prepared from
the user's archive (no published checksum: its sha256 is recorded), checked, and dry-run with the shipped configs."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from test_data_layouts import save_image

from conftest import REPO_ROOT as REPO
from norga.commands.cli import main
from norga.data import DataError, build_benchmark
from norga.data.ptm_folders import PTM_FOLDER_BENCHMARKS
from norga.data.prepare import PARTIAL

SPECS = {s.name: s for s in PTM_FOLDER_BENCHMARKS}


def make_tree(root: Path, folder: str, classes: int, train: int = 2, test: int = 1) -> Path:
    """``root/folder/{train,test}/c<k>/<i>.png``: tiny images, the class index as grey value."""
    for part, n in (("train", train), ("test", test)):
        for c in range(classes):
            for i in range(n):
                save_image(root / folder / part / f"c{c:03d}" / f"{i}.png", c % 256)
    return root


def zip_tree(src: Path, top: str, archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted((src / top).rglob("*")):
            z.write(path, path.relative_to(src).as_posix())


def test_the_four_benchmarks_have_the_papers_class_counts():
    assert {n: s.classes for n, s in SPECS.items()} == {"imagenet_a": 200, "objectnet": 200,
                                                         "omnibenchmark": 300, "vtab": 50}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_read_labels_follow_sorted_class_folders(name, tmp_path):
    root = make_tree(tmp_path, SPECS[name].folder, 4, train=3, test=2)
    bench = build_benchmark(name, root, 2, class_order="natural", image_size=16, options={"num_classes": 4})
    assert bench.class_names == ["c000", "c001", "c002", "c003"]
    assert len(bench.raw.train_y) == 12 and len(bench.raw.test_y) == 8
    image, label = bench.test_set(1)[0]
    assert label == 2 and tuple(image.shape) == (3, 16, 16)
    assert bench.info()["split_sha256"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_wrong_class_count_or_missing_folder_is_one_error_naming_the_fix(name, tmp_path):
    with pytest.raises(DataError, match="--mirror F"):
        build_benchmark(name, tmp_path, 2)
    root = make_tree(tmp_path, SPECS[name].folder, 3)
    with pytest.raises(DataError, match=f"has 3 class folders, expected {SPECS[name].classes}"):
        build_benchmark(name, root, 1)


def test_train_and_test_with_different_classes_is_refused(tmp_path):
    root = make_tree(tmp_path, "objectnet", 2)
    save_image(root / "objectnet" / "train" / "extra" / "0.png", 1)
    save_image(root / "objectnet" / "test" / "other" / "0.png", 1)
    with pytest.raises(DataError, match="different class folders"):
        build_benchmark("objectnet", root, 1, options={"num_classes": 3})


@pytest.mark.parametrize("name", sorted(SPECS))
def test_prepare_from_the_users_archive_records_its_sha256_then_check(name, tmp_path, capsys):
    spec, src, mirror, root = SPECS[name], tmp_path / "src", tmp_path / "mirror", tmp_path / "data"
    make_tree(src, spec.folder, spec.classes, train=1, test=1)
    zip_tree(src, spec.folder.split("/")[0], mirror / spec.archive)
    args = ["data", "prepare", name, "--root", str(root), "--no-progress"]
    assert main(args) == 2  # no public link: the archive must come from --mirror
    assert "--mirror F" in capsys.readouterr().err and not (root / spec.folder).exists()
    assert main([*args, "--mirror", str(mirror)]) == 0
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and f"{name}: prepared under {root}" in out and not (root / PARTIAL).exists()
    assert main([*args, "--check"]) == 0
    assert "no problems found" in capsys.readouterr().out
    assert main([*args, "--mirror", str(mirror)]) == 0 and "nothing to do" in capsys.readouterr().out


def test_prepare_with_a_trusted_sha256_refuses_another_file(tmp_path, capsys):
    src, mirror, root = tmp_path / "src", tmp_path / "mirror", tmp_path / "data"
    make_tree(src, "vtab-cil/vtab", 50, train=1, test=1)
    zip_tree(src, "vtab-cil", mirror / "vtab-cil.zip")
    assert main(["data", "prepare", "vtab", "--root", str(root), "--mirror", str(mirror), "--no-progress",
                 "--sha256", "vtab-cil.zip=" + "0" * 64]) == 2
    assert "checksum mismatch" in capsys.readouterr().err and not (root / "vtab-cil").exists()


def test_offline_prints_the_layout_and_writes_nothing(tmp_path, capsys):
    assert main(["data", "prepare", "omnibenchmark", "--root", str(tmp_path / "d"), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "omnibenchmark.zip" in out and "omnibenchmark/train/<class>" in out and not (tmp_path / "d").exists()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_dry_run_of_the_shipped_config_on_a_fixture(name, tmp_path, capsys):
    root = make_tree(tmp_path, SPECS[name].folder, 4)
    status = main(["train", "--config", str(REPO / "configs" / f"{name}_aper.yaml"), "--dry-run",
                   "--set", f"data.root={root}", "--set", "data.options={num_classes: 4}",
                   "--set", "data.num_tasks=2", "--set", "data.classes_per_task=2", "--set", "data.image_size=32",
                   "--set", "model.pretrained=false", "--set", "model.preset=null",
                   "--set", "model.name=vit_base_patch16_224",
                   "--set", "model.timm_kwargs={patch_size: 4, embed_dim: 64, depth: 2, num_heads: 2}"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert f"{name}: 4 classes in 2 tasks" in out
