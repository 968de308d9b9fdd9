"""norga data prepare verifies content (issue #66): every file a benchmark needs is checked by its published
checksum or by reading it before "prepared" or "nothing to do"; a wrong archive or a wrong file in place is one
``error:`` line naming the file and the fix, with ``--root`` unchanged; the write guard never replaces a user's
file; a missing ``--mirror`` folder is named as such. Local fixture archives only, never the network."""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from test_data_prepare import fixture_sizes, sha256, tar_of  # noqa: F401  (fixture)

from norga.commands.cli import main
from norga.data import DataError, build_benchmark
from norga.data.prepare import PARTIAL, PREPARERS, get_preparer


def cifar_folder(src: Path, parts=("train", "test", "meta"), fill: int = 7, names: int = 100) -> Path:
    """A CIFAR-100-format ``cifar-100-python/`` (200 train, 100 test rows) holding ``parts``."""
    folder = src / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 200), ("test", 100)):
        if split in parts:
            with open(folder / split, "wb") as f:
                pickle.dump({"data": np.full((n, 3072), fill, np.uint8), "fine_labels": [i % 100 for i in range(n)]},
                            f)
    if "meta" in parts:
        with open(folder / "meta", "wb") as f:
            pickle.dump({"fine_label_names": [f"c{i}" for i in range(names)]}, f)
    return folder


def cifar_mirror(tmp_path: Path, name: str = "mirror", **kwargs) -> Path:
    """A mirror folder holding a cifar-100-python.tar.gz made by :func:`cifar_folder`."""
    src = tmp_path / f"{name}-src"
    cifar_folder(src, **kwargs)
    tar_of(tmp_path / name / "cifar-100-python.tar.gz", src, ["cifar-100-python"])
    return tmp_path / name


def prepare(root: Path, mirror: Path, *extra) -> list:
    args = ["data", "prepare", "cifar100", "--root", str(root), "--mirror", str(mirror), "--no-progress"]
    return [*args, "--sha256", f"cifar-100-python.tar.gz={sha256(mirror / 'cifar-100-python.tar.gz')}", *extra]


def hashes(root: Path) -> dict:
    """Every file under ``root`` (and every folder) with its bytes' sha256: the root's state."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in root.rglob("*")}


def one_error(capsys, status: int) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), (status, err)
    return lines[0]


def test_an_archive_with_only_a_junk_train_file_is_refused(tmp_path, fixture_sizes, capsys):
    src, mirror, root = tmp_path / "src", tmp_path / "mirror", tmp_path / "data"
    (src / "cifar-100-python").mkdir(parents=True)
    (src / "cifar-100-python" / "train").write_bytes(b"junk")
    tar_of(mirror / "cifar-100-python.tar.gz", src, ["cifar-100-python"])
    line = one_error(capsys, main(prepare(root, mirror)))
    assert "its cifar-100-python/train is not a readable pickle" in line and "not the cifar100 archive" in line
    assert f"replace {mirror / 'cifar-100-python.tar.gz'} with the right file" in line
    assert hashes(root) == {}  # nothing placed, no partial folder left


@pytest.mark.parametrize("kwargs, message", [
    ({"parts": ("train",)}, "its cifar-100-python/test is missing"),
    ({"names": 10}, "lists 10 names under 'fine_label_names', expected 100"),
])
def test_an_archive_missing_a_file_or_with_wrong_names_is_refused(kwargs, message, tmp_path, fixture_sizes, capsys):
    root = tmp_path / "data"
    line = one_error(capsys, main(prepare(root, cifar_mirror(tmp_path, **kwargs))))
    assert message in line and "nothing was extracted" in line and hashes(root) == {}


def test_the_published_sizes_are_required(tmp_path, capsys):
    """Without the fixture sizes, 200 rows are not CIFAR-100's 50000."""
    line = one_error(capsys, main(prepare(tmp_path / "data", cifar_mirror(tmp_path))))
    assert "train holds 200 images where the published cifar100 train file holds 50000" in line


def test_a_junk_file_in_place_is_named_not_nothing_to_do(tmp_path, fixture_sizes, capsys):
    """The issue's re-run: train junk, test and meta missing -> not 'nothing to do'; the file named, root unchanged."""
    root = tmp_path / "data"
    (root / "cifar-100-python").mkdir(parents=True)
    (root / "cifar-100-python" / "train").write_bytes(b"junk")
    before = hashes(root)
    line = one_error(capsys, main(prepare(root, cifar_mirror(tmp_path))))
    assert line.startswith(f"error: {root / 'cifar-100-python' / 'train'}: is not a readable pickle")
    assert "delete it" in line and hashes(root) == before


def test_missing_files_are_completed_beside_identical_ones(tmp_path, fixture_sizes, capsys):
    root, mirror = tmp_path / "data", cifar_mirror(tmp_path)
    cifar_folder(root, parts=("train",))  # the user's copy of train, the same bytes as the archive's
    mtime = (root / "cifar-100-python" / "train").stat().st_mtime_ns
    assert main(prepare(root, mirror)) == 0
    assert "cifar100: prepared under" in capsys.readouterr().out
    assert (root / "cifar-100-python" / "train").stat().st_mtime_ns == mtime  # left as it was
    assert (root / "cifar-100-python" / "meta").is_file() and not (root / PARTIAL).exists()
    assert main(prepare(root, mirror)) == 0 and "nothing to do" in capsys.readouterr().out


def test_a_users_different_file_is_never_replaced(tmp_path, fixture_sizes, capsys):
    root = tmp_path / "data"
    cifar_folder(root, parts=("train",), fill=9)  # a valid train pickle of the user's, other bytes
    before = hashes(root)
    line = one_error(capsys, main(prepare(root, cifar_mirror(tmp_path))))
    assert f"--root {root / 'cifar-100-python' / 'train'} exists and norga did not write it" in line
    assert hashes(root) == before


def test_a_file_norga_wrote_may_be_replaced_and_is_in_the_manifest(tmp_path, fixture_sizes, capsys):
    root = tmp_path / "data"
    assert main(prepare(root, cifar_mirror(tmp_path))) == 0
    manifest = json.loads((root / "cifar-100-python" / ".norga-written.json").read_text())["files"]
    assert manifest["train"] == sha256(root / "cifar-100-python" / "train") and set(manifest) == {"train", "test",
                                                                                                 "meta"}
    (root / "cifar-100-python" / "test").unlink()
    other = cifar_mirror(tmp_path, "other", fill=9)  # another archive: its train differs from the one norga wrote
    assert main(prepare(root, other)) == 0, capsys.readouterr().err
    assert sha256(root / "cifar-100-python" / "train") == sha256(tmp_path / "other-src" / "cifar-100-python" / "train")


def test_a_missing_mirror_folder_is_named(tmp_path, capsys):
    root, mirror = tmp_path / "data", tmp_path / "no-such-folder"
    line = one_error(capsys, main(["data", "prepare", "cifar100", "--root", str(root), "--mirror", str(mirror)]))
    assert line == (f"error: --mirror {mirror} does not exist; give the folder holding cifar-100-python.tar.gz "
                    "(or leave --mirror out to download them)")
    (tmp_path / "file").write_text("x")
    line = one_error(capsys, main(["data", "prepare", "cifar100", "--root", str(root), "--mirror",
                                   str(tmp_path / "file")]))
    assert "is a file, not a folder" in line and not root.exists()


def test_a_matching_published_checksum_verifies_without_reading(tmp_path, fixture_sizes, monkeypatch, capsys):
    root = tmp_path / "data"
    assert main(prepare(root, cifar_mirror(tmp_path))) == 0
    capsys.readouterr()

    def never(path):
        raise AssertionError("read despite a matching checksum")

    md5 = {p: hashlib.md5((root / p).read_bytes()).hexdigest() for p in ("cifar-100-python/train",)}
    items = tuple(dataclasses.replace(i, md5=md5[i.path], read=never) if i.path in md5 else i
                  for i in get_preparer("cifar100").contents)
    monkeypatch.setitem(PREPARERS, "cifar100", dataclasses.replace(PREPARERS["cifar100"], contents=items))
    assert main(prepare(root, tmp_path / "mirror")) == 0
    assert "verified 3 needed files and folders (1 by published checksum, 2 by reading them)" in capsys.readouterr().out


def test_a_pickle_holding_other_objects_is_not_loaded(tmp_path, fixture_sizes, capsys):
    root = tmp_path / "data"
    cifar_folder(root)
    with open(root / "cifar-100-python" / "meta", "wb") as f:
        pickle.dump({"fine_label_names": collections.OrderedDict()}, f)
    line = one_error(capsys, main(prepare(root, cifar_mirror(tmp_path))))
    assert "meta: holds a Python object collections.OrderedDict, not plain arrays" in line


def test_a_run_folder_as_root_is_refused(tmp_path, fixture_sizes, capsys):
    root = tmp_path / "run"
    root.mkdir()
    (root / "norga-run.json").write_text("{}")
    before = hashes(root)
    line = one_error(capsys, main(prepare(root, cifar_mirror(tmp_path))))
    assert "lies inside the run folder" in line and hashes(root) == before


def test_shipped_md5_values_are_torchvisions():
    """Of the archives and of the extracted CIFAR pickles (moved here from test_data_prepare.py)."""
    import torchvision.datasets as tvd

    from norga.data.preparers import CIFAR10_FILES_MD5, CIFAR100_FILES_MD5

    files = {a.name: a.checksum for p in ("cifar100", "five_datasets") for a in get_preparer(p).archives}
    assert files["cifar-100-python.tar.gz"] == f"md5:{tvd.CIFAR100.tgz_md5}"
    assert files["cifar-10-python.tar.gz"] == f"md5:{tvd.CIFAR10.tgz_md5}"
    for cls, folder in ((tvd.MNIST, "MNIST"), (tvd.FashionMNIST, "FashionMNIST")):
        assert all(files[f"{folder}/{name}"] == f"md5:{md5}" for name, md5 in cls.resources)
    for part in ("train", "test"):
        assert files[f"SVHN/{part}_32x32.mat"] == f"md5:{tvd.SVHN.split_list[part][2]}"
    for cls, shipped in ((tvd.CIFAR100, CIFAR100_FILES_MD5), (tvd.CIFAR10, CIFAR10_FILES_MD5)):
        published = dict(cls.train_list + cls.test_list) | {cls.meta["filename"]: cls.meta["md5"]}
        assert shipped == published


def test_idx_and_mat_readers_name_what_is_wrong(tmp_path):
    from norga.data.content_readers import ContentError, idx_file, svhn_mat

    labels = tmp_path / "train-labels-idx1-ubyte"
    labels.write_bytes(struct.pack(">II", 2049, 60000) + bytes(10))
    with pytest.raises(ContentError, match="truncated"):
        idx_file("mnist", "train", 1)(labels)
    labels.write_bytes(struct.pack(">II", 2051, 3) + bytes(3))
    with pytest.raises(ContentError, match="magic number 2051, expected 2049"):
        idx_file("mnist", "train", 1)(labels)
    (tmp_path / "x.mat").write_bytes(b"not a mat file at all" * 10)
    with pytest.raises(ContentError, match="not a readable MATLAB file"):
        svhn_mat("train")(tmp_path / "x.mat")


def test_an_npz_with_fewer_class_names_than_labels_is_one_line(tmp_path):
    path = tmp_path / "d.npz"
    x = np.zeros((6, 8, 8, 3), np.uint8)
    y = np.array([0, 1, 2, 3, 4, 5])
    np.savez(path, train_x=x, train_y=y, test_x=x, test_y=y, classes=np.array(["a", "b", "c"]))
    with pytest.raises(DataError) as err:
        build_benchmark("array", path, 2, image_size=8)
    message = str(err.value)
    assert str(path) in message and "3 class names" in message and "largest label is 5" in message
    assert "\n" not in message
