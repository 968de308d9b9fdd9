"""Named ImageNet-R splits (data.options.split): seeded (unchanged), coda_prompt (shipped or user yaml), folders."""
from __future__ import annotations

import collections
import hashlib

import numpy as np
import pytest
from PIL import Image

from norga.data import DataError, build_benchmark
from norga.data import imagenet_r_splits as splits
from norga.data.folders import split_checksum


def save_image(path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def bench(root, **options):
    return build_benchmark("imagenet_r", root, 4, image_size=16, options=options)


@pytest.fixture
def small_root(tmp_path):
    """The fixture of tests/test_data_layouts.py: 6 wnid folders with 10, 7, 5, 10, 3, 6 images."""
    for c, n in enumerate((10, 7, 5, 10, 3, 6)):
        for i in reversed(range(n)):
            save_image(tmp_path / "imagenet-r" / f"n0{c}000" / f"art_{i}.jpg", 40 * c)
    return tmp_path


@pytest.fixture(scope="module")
def full_root(tmp_path_factory):
    """Every file CODA-Prompt's split lists (30,000 empty .jpg files: the loader checks files, not pixels)."""
    root = tmp_path_factory.mktemp("imagenet_r_full")
    train, test, _ = splits.read_shipped()
    for wnid in {p.split("/")[0] for p in train + test}:
        (root / "imagenet-r" / wnid).mkdir(parents=True)
    for path in train + test:
        (root / "imagenet-r" / path).touch()
    return root


def test_seeded_split_is_unchanged(small_root):
    """The default split's sha256 equals the one norga recorded before named splits existed."""
    default = build_benchmark("imagenet_r", small_root, 3, image_size=16, options={"num_classes": 6})
    named = build_benchmark("imagenet_r", small_root, 3, image_size=16, options={"num_classes": 6,
                                                                                  "split": "seeded"})
    assert default.info()["split_sha256"] == "0080f1d9473fb70dd8a94d5be7536348a1e34f1e9bcc60302127e73a248e91b9"
    assert default.info() == named.info()
    assert default.info()["split"] == "per-class 80/20, sorted files, split_seed 0"
    assert np.array_equal(default.raw.train_x, named.raw.train_x)


def test_shipped_coda_prompt_split_matches_codas_files():
    train, test, classes = splits.read_shipped()
    assert (len(train), len(test), len(set(train) | set(test))) == (24000, 6000, 30000)
    assert sorted(classes.values()) == list(range(200))
    assert split_checksum(train, test) == splits.CODA_SPLIT_SHA256


def test_writing_the_shipped_split_again_gives_the_same_bytes(tmp_path):
    """The converter's format is the shipped file's: read, write again, byte-identical (hence same sha256)."""
    again = tmp_path / "again.tsv"
    splits.write_shipped(splits.read_shipped(), again)
    assert again.read_bytes() == splits.SHIPPED.read_bytes()


def test_corrupted_shipped_split_is_refused(full_root, tmp_path, monkeypatch):
    """A list that lost one line is refused by its sha256, through the benchmark too."""
    assert hashlib.sha256(splits.SHIPPED.read_bytes()).hexdigest() == splits.SHIPPED_SHA256
    lines = splits.SHIPPED.read_text().splitlines()
    bad = tmp_path / "corrupted.tsv"
    bad.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DataError, match=f"corrupted.tsv has sha256 .*, expected {splits.SHIPPED_SHA256}.*reinstall"):
        splits.read_shipped(bad)
    monkeypatch.setattr(splits, "SHIPPED", bad)
    with pytest.raises(DataError, match="damaged or modified"):
        bench(full_root, split="coda_prompt")
    monkeypatch.setattr(splits, "SHIPPED", tmp_path / "absent.tsv")
    with pytest.raises(DataError, match="cannot read norga's split list .*absent.tsv"):
        bench(full_root, split="coda_prompt")


def test_coda_prompt_split_loads_and_differs_from_seeded(full_root):
    coda = bench(full_root, split="coda_prompt")
    seeded = bench(full_root)
    assert coda.info()["split_sha256"] == splits.CODA_SPLIT_SHA256 != seeded.info()["split_sha256"]
    assert (len(coda.raw.train_x), len(coda.raw.test_x)) == (24000, 6000)
    _, _, classes = splits.read_shipped()
    path, label = coda.raw.train_x[0], coda.raw.train_y[0]
    assert classes[path.split("/")[-2]] == label  # CODA-Prompt's class ids, not the sorted folder index
    assert coda.raw.class_names[label] == path.split("/")[-2]
    # seeded: exactly round(0.8 n) per class; CODA-Prompt: drawn over the whole dataset, so not per class
    n = collections.Counter(p.split("/")[-2] for p in coda.raw.train_x)
    total = collections.Counter(p.split("/")[-2] for p in list(coda.raw.train_x) + list(coda.raw.test_x))
    assert any(n[c] != round(0.8 * total[c]) for c in total)


def test_coda_prompt_split_needs_every_listed_file(full_root, tmp_path):
    victim = full_root / "imagenet-r" / splits.read_shipped()[1][0]
    victim.unlink()
    try:
        with pytest.raises(DataError, match="coda_prompt lists 1 files absent"):
            bench(full_root, split="coda_prompt")
    finally:
        victim.touch()


def test_coda_prompt_from_user_yaml_is_checked(full_root, tmp_path):
    (tmp_path / "imagenet-r_train.yaml").write_text("data:\n- data/imagenet-r/n0/a.jpg\ntargets:\n- 0\n")
    (tmp_path / "imagenet-r_test.yaml").write_text("data:\n- data/imagenet-r/n0/b.jpg\ntargets:\n- 0\n")
    with pytest.raises(DataError, match="sha256"):
        bench(full_root, split="coda_prompt", split_root=str(tmp_path))
    with pytest.raises(DataError, match="has no imagenet-r_train.yaml"):
        bench(full_root, split="coda_prompt", split_root=str(tmp_path / "none"))
    texts = {p: (tmp_path / f"imagenet-r_{p}.yaml").read_text() for p in ("train", "test")}
    assert splits.coda_from_yaml(texts) == (["n0/a.jpg"], ["n0/b.jpg"], {"n0": 0})


def test_folders_split(tmp_path):
    for part, n in (("train", 4), ("test", 2)):
        for c in ("n02", "n01"):
            for i in range(n):
                save_image(tmp_path / "imagenet-r" / part / c / f"x_{i}.jpg", 9)
    b = build_benchmark("imagenet_r", tmp_path, 2, image_size=16, options={"split": "folders"})
    assert (len(b.raw.train_x), len(b.raw.test_x)) == (8, 4)
    assert b.raw.class_names == ["n01", "n02"] and "folders" in b.info()["split"]
    assert all(f"/train/{b.raw.class_names[y]}/" in x for x, y in zip(b.raw.train_x, b.raw.train_y))
    (tmp_path / "imagenet-r" / "test" / "n03").mkdir()
    with pytest.raises(DataError, match="different class folders"):
        build_benchmark("imagenet_r", tmp_path, 2, image_size=16, options={"split": "folders"})


def test_bad_split_options(small_root):
    with pytest.raises(DataError, match="split must be one of"):
        bench(small_root, split="coda")
    with pytest.raises(DataError, match="split_file goes with the default split"):
        bench(small_root, split="coda_prompt", split_file="x.json")
    with pytest.raises(DataError, match="split_root"):
        bench(small_root, split_root="somewhere")
