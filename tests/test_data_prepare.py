"""norga data prepare: fixture archives (tar, tgz, zip, gz, plain files) in a local mirror or file:// URLs,
never the network. Checksums, idempotence, nothing extracted on a bad checksum, --offline, --check."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import pickle
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_data_layouts import cub_root, five_root, save_image  # noqa: F401  (fixtures)

from norga.commands.cli import main
from norga.data import DataError, build_benchmark
from norga.data.prepare import PARTIAL, PREPARERS, get_preparer


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tar_of(archive: Path, src_root: Path, entries, mode: str = "w:gz") -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode) as tar:
        for entry in entries:
            tar.add(src_root / entry, arcname=entry)


def gz_of(archive: Path, source: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(gzip.compress(source.read_bytes()))


def cifar100_src(src: Path) -> None:
    folder = src / "cifar-100-python"
    folder.mkdir(parents=True)
    for split, n in (("train", 200), ("test", 100)):
        labels = [i % 100 for i in range(n)]
        with open(folder / split, "wb") as f:
            pickle.dump({"data": np.full((n, 3072), 7, np.uint8), "fine_labels": labels}, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)]}, f)


def imagenet_r_files() -> list:
    """3 of the real classes, 4 of their real file names each."""
    from norga.data.imagenet_r_splits import read_shipped

    files = sorted(read_shipped()[0])
    return [name for wnid in sorted({p.split("/")[0] for p in files})[:3]
            for name in [p for p in files if p.startswith(wnid + "/")][:4]]


def imagenet_r_src(src: Path) -> None:
    for i, name in enumerate(imagenet_r_files()):
        save_image(src / "imagenet-r" / name, 30 * (i // 4))


def build_mirror(benchmark: str, src: Path, mirror: Path) -> None:
    """The benchmark's archives, made from a fixture folder in its final layout."""
    if benchmark == "cifar100":
        cifar100_src(src)
        tar_of(mirror / "cifar-100-python.tar.gz", src, ["cifar-100-python"])
    elif benchmark == "imagenet_r":
        imagenet_r_src(src)
        tar_of(mirror / "imagenet-r.tar", src, ["imagenet-r"], "w")
    elif benchmark == "cub200":
        (src / "attributes.txt").write_text("1 has_bill_shape::dagger\n")  # beside the folder in the real tgz
        tar_of(mirror / "CUB_200_2011.tgz", src, ["CUB_200_2011", "attributes.txt"])
    else:
        for part in ("train", "test"):
            (mirror / "SVHN").mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "SVHN" / f"{part}_32x32.mat", mirror / "SVHN" / f"{part}_32x32.mat")
        for folder in ("MNIST", "FashionMNIST"):
            for raw in (src / folder / "raw").iterdir():
                gz_of(mirror / folder / f"{raw.name}.gz", raw)
        tar_of(mirror / "cifar-10-python.tar.gz", src, ["cifar-10-batches-py"])
        with zipfile.ZipFile(mirror / "notMNIST.zip", "w") as z:
            for path in sorted((src / "notMNIST").rglob("*.png")):
                z.write(path, str(path.relative_to(src)))


def sha_args(mirror: Path, skip=()) -> list:
    """``--sha256 NAME=HEX`` for every file of the mirror: the fixtures are not the published archives."""
    files = [p for p in sorted(mirror.rglob("*")) if p.is_file() and p.relative_to(mirror).as_posix() not in skip]
    return [a for p in files for a in ("--sha256", f"{p.relative_to(mirror).as_posix()}={sha256(p)}")]


@pytest.fixture
def tv_unchecked(monkeypatch):
    """torchvision checks its files' md5 on load; fixture files differ."""
    import torchvision.datasets.cifar as tv_cifar
    import torchvision.datasets.svhn as tv_svhn

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    for cls in (tv_cifar.CIFAR10, tv_cifar.CIFAR100, tv_svhn.SVHN):
        monkeypatch.setattr(cls, "_check_integrity", lambda self: True)


FIXTURE_ROWS = {"cifar100": {"train": 200, "test": 100}, "cifar10": {"data_batch": 10, "test_batch": 20}, "svhn":
                {"train": 30, "test": 20}, **{d: {"train": 30, "t10k": 20} for d in ("mnist", "fashion_mnist")}}


@pytest.fixture
def fixture_sizes(monkeypatch):
    """Content verification expects the published sizes; the fixtures are small (and ImageNet-R has 12 files)."""
    import norga.data.content_readers as readers
    import norga.data.preparers as preparers

    for dataset, rows in FIXTURE_ROWS.items():
        monkeypatch.setitem(readers.ROWS, dataset, rows)
    monkeypatch.setattr(preparers, "_imagenet_r_files", imagenet_r_files)


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*")}


def prepare_args(benchmark, root, mirror, *extra):
    return ["data", "prepare", benchmark, "--root", str(root), "--mirror", str(mirror), "--no-progress", *extra]


@pytest.mark.parametrize("benchmark", ["cifar100", "imagenet_r", "cub200", "five_datasets"])
def test_prepare_from_a_mirror_then_nothing_to_do(benchmark, request, tmp_path, tv_unchecked, fixture_sizes, capsys):
    src = request.getfixturevalue("five_root") if benchmark == "five_datasets" else (
        request.getfixturevalue("cub_root") if benchmark == "cub200" else tmp_path / "src")
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    build_mirror(benchmark, src, mirror)
    assert main(prepare_args(benchmark, root, mirror, *sha_args(mirror))) == 0
    out = capsys.readouterr().out
    assert "sha256 verified" in out and f"{benchmark}: prepared under {root}" in out
    assert not (root / PARTIAL).exists() and not (root / "downloads").exists()
    options = {"num_classes": 3} if benchmark == "imagenet_r" else {}
    num_tasks = {"cifar100": 10, "imagenet_r": 3, "cub200": 2, "five_datasets": 5}[benchmark]
    bench = build_benchmark(benchmark, root, num_tasks, image_size=16, options=options)
    assert len(bench.raw.train_y) > 0
    before = snapshot(root)
    shutil.rmtree(mirror)  # a second run needs nothing
    assert main(prepare_args(benchmark, root, mirror)) == 0
    out = capsys.readouterr().out
    assert "nothing to do, every file is in place and verified" in out and snapshot(root) == before
    assert f"{benchmark}: verified" in out and "by reading them" in out
    if benchmark != "imagenet_r":  # the fixture is not the 200 classes of ImageNet-R
        assert main(["data", "prepare", benchmark, "--root", str(root), "--check", "--no-progress"]) == 0
        assert "no problems found" in capsys.readouterr().out and snapshot(root) == before


def test_wrong_checksum_is_one_error_and_nothing_is_extracted(cub_root, tmp_path, capsys):
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    build_mirror("cub200", cub_root, mirror)
    archive = mirror / "CUB_200_2011.tgz"
    digest = sha256(archive)
    assert main(prepare_args("cub200", root, mirror)) == 2  # the shipped md5 is the real archive's
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: CUB_200_2011.tgz: checksum mismatch, md5")
    assert "97eceeb196236b17998738112f37df78" in err[0] and "nothing was extracted" in err[0]
    assert not (root / "CUB_200_2011").exists() and not (root / PARTIAL).exists()
    assert sha256(archive) == digest  # the mirror's file is left alone


def test_one_bad_file_of_many_extracts_none(five_root, tmp_path, capsys):
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    build_mirror("five_datasets", five_root, mirror)
    args = sha_args(mirror, skip=("notMNIST.zip",))
    assert main(prepare_args("five_datasets", root, mirror, *args)) == 2
    assert "notMNIST.zip: checksum mismatch, git-sha1" in capsys.readouterr().err
    assert not root.exists() or not any(root.iterdir())


def test_download_from_url_and_failed_download(cub_root, tmp_path, monkeypatch, capsys):
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    build_mirror("cub200", cub_root, mirror)
    archive = get_preparer("cub200").archives[0]
    served = dataclasses.replace(archive, urls=(f"file://{tmp_path}/nowhere.tgz", (mirror / archive.name).as_uri()),
                                 checksum=f"sha256:{sha256(mirror / archive.name)}")
    monkeypatch.setitem(PREPARERS, "cub200", dataclasses.replace(PREPARERS["cub200"], archives=(served,)))
    assert main(["data", "prepare", "cub200", "--root", str(root), "--no-progress"]) == 0
    assert (root / "CUB_200_2011" / "images.txt").is_file() and (root / "downloads" / archive.name).is_file()
    capsys.readouterr()
    gone = dataclasses.replace(served, urls=(f"file://{tmp_path}/nowhere.tgz",))
    monkeypatch.setitem(PREPARERS, "cub200", dataclasses.replace(PREPARERS["cub200"], archives=(gone,)))
    assert main(["data", "prepare", "cub200", "--root", str(tmp_path / "other"), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert f"from file://{tmp_path}/nowhere.tgz" in out and "Final layout:" in out
    assert err.count("\n") == 1 and "could not be downloaded" in err


def test_unpublished_checksum_is_reported_not_invented(cub_root, tmp_path, monkeypatch, capsys):
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    build_mirror("cub200", cub_root, mirror)
    unknown = dataclasses.replace(get_preparer("cub200").archives[0], checksum=None)
    monkeypatch.setitem(PREPARERS, "cub200", dataclasses.replace(PREPARERS["cub200"], archives=(unknown,)))
    assert main(prepare_args("cub200", root, mirror)) == 0
    out = capsys.readouterr().out
    assert "NOT VERIFIED, no published checksum" in out and sha256(mirror / "CUB_200_2011.tgz") in out


def test_offline_prints_urls_and_layout_and_writes_nothing(tmp_path, capsys):
    assert main(["data", "prepare", "five_datasets", "--root", str(tmp_path / "d"), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in out
    assert "notMNIST.zip  [git-sha1:" in out and f"{tmp_path / 'd'}/notMNIST/{{Train,Test}}/{{A..J}}/*.png" in out
    assert not (tmp_path / "d").exists()


def test_check_finds_a_missing_class_and_a_corrupt_image(cub_root, tmp_path, capsys):
    images = cub_root / "CUB_200_2011" / "images"
    shutil.rmtree(images / "002.Bird_1")
    (images / "003.Bird_2" / "Bird_2_2.jpg").write_bytes(b"not a jpeg")
    before = snapshot(cub_root)
    assert main(["data", "prepare", "cub200", "--root", str(cub_root), "--check", "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert "train: 4 classes" in out and "classes have no images: ['002.Bird_1']" in out
    assert "unreadable image" in out and "Bird_2_2.jpg" in out
    assert err.startswith("error: cub200 under") and err.count("\n") == 1
    assert snapshot(cub_root) == before


def test_check_imagenet_r_and_five_datasets(five_root, tmp_path, tv_unchecked, capsys):
    imagenet_r_src(tmp_path / "ir")
    assert main(["data", "prepare", "imagenet_r", "--root", str(tmp_path / "ir"), "--check", "--no-progress"]) == 2
    out = capsys.readouterr().out
    assert "197 of 200 classes have no images" in out and "images missing in 3 classes" in out
    shutil.rmtree(five_root / "notMNIST" / "Test" / "C")
    assert main(["data", "prepare", "five_datasets", "--root", str(five_root), "--check", "--no-progress"]) == 2
    assert "notMNIST folders ['C'] not found" in capsys.readouterr().out


@pytest.mark.parametrize("value, message", [("x=1234", "expected NAME=<64 hex digits>"),
                                            (f"nope.tgz={'a' * 64}", "not files of cub200")])
def test_bad_sha256_option(value, message, tmp_path, capsys):
    assert main(["data", "prepare", "cub200", "--root", str(tmp_path), "--sha256", value]) == 2
    assert message in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_a_tar_escaping_its_folder_is_refused(tmp_path):
    from norga.data.prepare import extract

    (tmp_path / "evil.txt").write_text("x")
    with tarfile.open(tmp_path / "evil.tar", "w") as tar:
        tar.add(tmp_path / "evil.txt", arcname="../escaped.txt")
    (tmp_path / "out").mkdir()
    with pytest.raises((tarfile.TarError, DataError)):
        extract(tmp_path / "evil.tar", tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists() and not any((tmp_path / "out").iterdir())


def served_cub(cub_root, tmp_path, monkeypatch):
    """The CUB fixture archive served from a file:// URL, its sha256 the checksum (no network)."""
    mirror = tmp_path / "mirror"
    build_mirror("cub200", cub_root, mirror)
    url = (mirror / "CUB_200_2011.tgz").as_uri()
    archive = dataclasses.replace(get_preparer("cub200").archives[0], urls=(url,),
                                  checksum=f"sha256:{sha256(mirror / 'CUB_200_2011.tgz')}")
    monkeypatch.setitem(PREPARERS, "cub200", dataclasses.replace(PREPARERS["cub200"], archives=(archive,)))
    return url


def test_data_download_true_uses_the_verified_preparer(cub_root, tmp_path, monkeypatch, capsys):
    import norga.data.folders as folders

    monkeypatch.setattr(folders, "CUB_URL", served_cub(cub_root, tmp_path, monkeypatch))
    bench = build_benchmark("cub200", tmp_path / "data", 2, image_size=16, download=True)
    assert len(bench.raw.train_y) == 13 and "sha256 verified" in capsys.readouterr().out


def test_an_interrupted_extraction_leaves_nothing(cub_root, tmp_path, monkeypatch, capsys):
    import norga.data.archives as prepare_module

    served_cub(cub_root, tmp_path, monkeypatch)
    real = prepare_module.extract

    def interrupted(path, target):
        real(path, target)
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "extract", interrupted)
    root = tmp_path / "data"
    assert main(["data", "prepare", "cub200", "--root", str(root), "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (root / "CUB_200_2011").exists() and not (root / PARTIAL).exists()
    monkeypatch.setattr(prepare_module, "extract", real)
    assert main(["data", "prepare", "cub200", "--root", str(root), "--no-progress"]) == 0  # the download is reused
    assert (root / "CUB_200_2011" / "images.txt").is_file()


def test_data_list_and_per_class_counts(cub_root, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "imagenet-r.tar  md5:a61312130a589d0ca1a8fca1f2bd3337" in out and "five_datasets:" in out
    assert main(["data", "prepare", "cub200", "--root", str(cub_root), "--check", "--per-class", "--no-decode"]) == 0
    out = capsys.readouterr().out
    assert "train: 4 classes, 13 images" in out and "  001.Bird_0: 3\n  002.Bird_1: 4\n" in out
