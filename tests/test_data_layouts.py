"""ImageNet-R, CUB-200 and 5-Datasets read from tiny fixtures written in each dataset's real on-disk layout."""
from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
from PIL import Image

from norga.data import DataError, build_benchmark
from norga.data.five_datasets import ORDER
from norga.data.folders import imagenet_r_split, list_class_files


def save_image(path, value: int, size: int = 8, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shape = (size, size, 3) if mode == "RGB" else (size, size)
    Image.fromarray(np.full(shape, value, np.uint8), mode).save(path)


# ------------------------------------------------------------------ ImageNet-R
@pytest.fixture
def imagenet_r_root(tmp_path):
    """6 wnid folders with 10, 7, 5, 10, 3, 6 images (unsorted creation order)."""
    for c, n in enumerate((10, 7, 5, 10, 3, 6)):
        for i in reversed(range(n)):
            save_image(tmp_path / "imagenet-r" / f"n0{c}000" / f"art_{i}.jpg", 40 * c)
    return tmp_path


def imagenet_r(root, **options):
    return build_benchmark("imagenet_r", root, 3, image_size=16, options={"num_classes": 6, **options})


def test_imagenet_r_split_is_per_class_80_20_deterministic_and_checksummed(imagenet_r_root):
    bench = imagenet_r(imagenet_r_root)
    assert bench.info()["num_train"] == 8 + 6 + 4 + 8 + 2 + 5 and bench.info()["num_test"] == 2 + 1 + 1 + 2 + 1 + 1
    train, test = set(bench.raw.train_x), set(bench.raw.test_x)
    assert not train & test and len(train | test) == 41
    again = imagenet_r(imagenet_r_root)
    assert again.info()["split_sha256"] == bench.info()["split_sha256"]
    assert list(again.raw.test_x) == list(bench.raw.test_x)
    other = imagenet_r(imagenet_r_root, split_seed=1)
    assert other.info()["split_sha256"] != bench.info()["split_sha256"]
    x, y = bench.train_set(0)[0]
    assert x.shape == (3, 16, 16) and y in bench.task_classes[0]
    # the split depends on the sorted listing only, not on the order files were created in
    files = list_class_files(imagenet_r_root / "imagenet-r")
    shuffled = {c: list(reversed(v)) for c, v in files.items()}
    assert imagenet_r_split(files, 0) == imagenet_r_split(shuffled, 0)


def test_imagenet_r_labels_follow_folders(imagenet_r_root):
    bench = imagenet_r(imagenet_r_root, split_seed=3)
    for path, label in zip(bench.raw.train_x, bench.raw.train_y):
        assert f"n0{label}000" in path


def test_imagenet_r_user_split_file(imagenet_r_root, tmp_path):
    files = list_class_files(imagenet_r_root / "imagenet-r")
    every = [p for c in sorted(files) for p in files[c]]
    split = {"train": every[::2], "test": every[1::2]}
    (tmp_path / "split.json").write_text(json.dumps(split))
    bench = imagenet_r(imagenet_r_root, split_file=str(tmp_path / "split.json"))
    assert len(bench.raw.train_x) == len(split["train"]) and "file" in bench.info()["split"]
    (tmp_path / "bad.json").write_text(json.dumps({"train": ["n00000/nope.jpg"], "test": []}))
    with pytest.raises(DataError, match="lists 1 files absent"):
        imagenet_r(imagenet_r_root, split_file=str(tmp_path / "bad.json"))


def test_imagenet_r_errors(imagenet_r_root, tmp_path):
    with pytest.raises(DataError, match=f"folder not found: {tmp_path / 'none' / 'imagenet-r'}.*imagenet-r.tar"):
        imagenet_r(tmp_path / "none")
    with pytest.raises(DataError, match="has 6 class folders.*200 class folders"):
        build_benchmark("imagenet_r", imagenet_r_root, 10)
    with pytest.raises(DataError, match="unknown data.options"):
        imagenet_r(imagenet_r_root, splitseed=1)


# ------------------------------------------------------------------ CUB-200
@pytest.fixture
def cub_root(tmp_path):
    """4 classes x 5 images; official-style split: image ids 1..20, every third image is test."""
    folder = tmp_path / "CUB_200_2011"
    images, labels, split = [], [], []
    for i in range(20):
        c = i % 4
        rel = f"{c + 1:03d}.Bird_{c}/Bird_{c}_{i}.jpg"
        save_image(folder / "images" / rel, 50 * c)
        images.append(f"{i + 1} {rel}")
        labels.append(f"{i + 1} {c + 1}")
        split.append(f"{i + 1} {0 if i % 3 == 0 else 1}")
    for name, lines in (("images.txt", images), ("image_class_labels.txt", labels),
                        ("train_test_split.txt", split),
                        ("classes.txt", [f"{c + 1} {c + 1:03d}.Bird_{c}" for c in range(4)])):
        (folder / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_cub200_uses_the_official_split_file(cub_root):
    bench = build_benchmark("cub200", cub_root, 2, image_size=16, class_order="natural")
    assert bench.info()["num_train"] == 13 and bench.info()["num_test"] == 7
    assert all(int(p.split("_")[-1][:-4]) % 3 == 0 for p in bench.raw.test_x)
    assert bench.class_names == ["001.Bird_0", "002.Bird_1", "003.Bird_2", "004.Bird_3"]
    assert set(bench.raw.train_y.tolist()) == {0, 1, 2, 3}
    assert bench.test_set(1)[0][0].shape == (3, 16, 16)


def test_cub200_errors(cub_root, tmp_path):
    with pytest.raises(DataError, match=r"cub200: \['images.txt'.*CUB_200_2011.tgz"):
        build_benchmark("cub200", tmp_path / "elsewhere", 2)
    (cub_root / "CUB_200_2011" / "images" / "001.Bird_0" / "Bird_0_0.jpg").unlink()
    with pytest.raises(DataError, match="1 images listed in images.txt are missing"):
        build_benchmark("cub200", cub_root, 2)


# ------------------------------------------------------------------ 5-Datasets
def fill(dataset: int, label: int) -> int:
    """Pixel value of fixture images: encodes the original dataset and label."""
    return 5 * (10 * dataset + label)


def write_idx(folder, prefix: str, dataset: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 30), ("t10k", 20)):
        labels = np.arange(n, dtype=np.uint8) % 10
        images = np.stack([np.full((28, 28), fill(dataset, y), np.uint8) for y in labels])
        (folder / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


@pytest.fixture
def five_root(tmp_path, monkeypatch):
    from scipy.io import savemat
    import torchvision.datasets.cifar as tv_cifar
    import torchvision.datasets.svhn as tv_svhn

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)  # fixture md5 sums differ
    monkeypatch.setattr(tv_cifar.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(tv_svhn.SVHN, "_check_integrity", lambda self: True)
    (tmp_path / "SVHN").mkdir()
    for split, n in (("train", 30), ("test", 20)):
        labels = np.arange(n) % 10
        x = np.stack([np.full((32, 32, 3), fill(0, y), np.uint8) for y in labels], axis=-1)  # (32, 32, 3, N)
        savemat(tmp_path / "SVHN" / f"{split}_32x32.mat", {"X": x, "y": np.where(labels == 0, 10, labels)[:, None]})
    write_idx(tmp_path / "MNIST" / "raw", "", 1)
    cifar = tmp_path / "cifar-10-batches-py"
    cifar.mkdir()
    for name, n in [(f"data_batch_{i}", 10) for i in range(1, 6)] + [("test_batch", 20)]:
        labels = [i % 10 for i in range(n)]
        data = np.stack([np.full(3072, fill(2, y), np.uint8) for y in labels])
        with open(cifar / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels}, f)
    with open(cifar / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    for part, n in (("Train", 3), ("Test", 2)):
        for label, letter in enumerate("ABCDEFGHIJ"):
            for i in range(n):
                save_image(tmp_path / "notMNIST" / part / letter / f"{letter}{i}.png", fill(3, label), 28, "L")
    write_idx(tmp_path / "FashionMNIST" / "raw", "", 4)
    return tmp_path


def test_five_datasets_order_offsets_and_grayscale(five_root):
    bench = build_benchmark("five_datasets", five_root, 5, image_size=16, seed=7, class_order_rng="numpy")
    counts = bench.info()
    assert counts["svhn_train"] == 30 and counts["notmnist_train"] == 30 and counts["fashion_mnist_test"] == 20
    assert bench.num_classes == 50 and bench.task_classes[4] == list(range(40, 50))
    for t, name in enumerate(ORDER):
        assert all(bench.class_names[c].startswith(name) for c in bench.task_classes[t])
        assert sorted(bench.class_order[10 * t:10 * t + 10]) == list(range(10 * t, 10 * t + 10))
    for item, label in zip(bench.raw.train_x, bench.raw.train_y):  # original label = 10 * dataset + digit
        pixel = np.asarray(Image.open(item)) if isinstance(item, str) else item
        assert int(pixel.flat[0]) == fill(label // 10, label % 10)
    x, y = bench.train_set(1)[0]  # MNIST, grayscale -> 3 channels
    assert x.shape == (3, 16, 16) and y in range(10, 20)
    natural = build_benchmark("five_datasets", five_root, 5, image_size=16, class_order="natural")
    assert natural.class_order == list(range(50))
    # the authors' seeding shuffles the order of the datasets (tasks), classes in natural order within each
    authors = build_benchmark("five_datasets", five_root, 5, image_size=16, seed=42, transforms="official")
    tasks = [authors.class_names[authors.task_classes[t][0]].split(":")[0] for t in range(5)]
    assert tasks == ["notmnist", "mnist", "cifar10", "fashion_mnist", "svhn"]
    assert all(authors.class_order[10 * t:10 * t + 10] == sorted(authors.class_order[10 * t:10 * t + 10])
               for t in range(5))
    assert authors.recipes == ("generic", "generic", "cifar", "cifar", "cifar")
    x, _ = authors.train_set(0, train_transform=False)[0]  # notMNIST, generic recipe: no normalisation
    assert x.min() >= 0.0 and x.max() <= 1.0


def test_five_datasets_errors(five_root, tmp_path):
    with pytest.raises(DataError, match="5 fixed tasks"):
        build_benchmark("five_datasets", five_root, 10)
    with pytest.raises(DataError, match="positions 0-9 must be the classes of fixed task 0"):
        build_benchmark("five_datasets", five_root, 5, class_order=list(range(49, -1, -1)))
    with pytest.raises(DataError, match=f"5 of 5 datasets missing(.|\\n)*SVHN not found or corrupt under "
                                        f"{tmp_path / 'empty' / 'SVHN'}(.|\\n)*notMNIST"):
        build_benchmark("five_datasets", tmp_path / "empty", 5)
    for f in (five_root / "notMNIST" / "Test" / "J").iterdir():
        f.unlink()
    (five_root / "notMNIST" / "Test" / "J").rmdir()
    with pytest.raises(DataError, match=r"notMNIST folders \['J'\] not found"):
        build_benchmark("five_datasets", five_root, 5)


def test_real_mnist_npz_as_array_benchmark(shared_dir):
    path = shared_dir / "data" / "mnist.npz"
    if not path.is_file():
        pytest.skip("mnist.npz absent")
    bench = build_benchmark("array", path, 5, image_size=28)
    assert bench.num_classes == 10 and bench.info()["num_train"] == 60_000
    assert bench.train_set(0)[0][0].shape == (3, 28, 28)
