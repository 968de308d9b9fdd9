"""Benchmarks: splits, class order, remapping, errors at build time, array/cifar layouts, real CIFAR-100 (opt-in)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from norga.data import DataError, build_benchmark, split_tasks


def synthetic(**kw):
    args = dict(name="synthetic", root=None, num_tasks=3, image_size=32,
                options={"num_classes": 12, "train_per_class": 5, "test_per_class": 3})
    args.update(kw)
    return build_benchmark(**args)


def test_tasks_are_disjoint_cover_all_classes_and_labels_are_remapped():
    bench = synthetic()
    assert bench.task_classes == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    seen = set()
    for t in range(3):
        train_labels = {y for _, y in bench.train_set(t)}
        assert train_labels == set(bench.task_classes[t]) and not (train_labels & seen)
        seen |= train_labels
        assert len(bench.train_set(t)) == 4 * 5 and len(bench.test_set(t)) == 4 * 3
    x, _ = bench.test_set(0)[0]
    assert x.shape == (3, 32, 32)


def test_class_order_seeded_natural_explicit_and_first_task():
    assert synthetic(seed=3).class_order == synthetic(seed=3).class_order != synthetic(seed=4).class_order
    assert synthetic(class_order="natural").class_order == list(range(12))
    explicit = list(range(11, -1, -1))
    bench = synthetic(class_order=explicit)
    assert bench.class_names[0] == "class_11"  # remapped label 0 is original class 11
    assert split_tasks(100, 6, None, 50) == [list(range(50))] + [list(range(50 + 10 * i, 60 + 10 * i))
                                                                 for i in range(5)]
    with pytest.raises(DataError, match="12 classes cannot be split into 5 tasks"):
        synthetic(num_tasks=5)
    with pytest.raises(DataError, match="permutation"):
        synthetic(class_order=[0, 1])


def test_errors_name_the_path_and_happen_at_build_time(tmp_path):
    with pytest.raises(DataError, match="unknown benchmark 'imagenet'; registered"):
        build_benchmark("imagenet", tmp_path, 10)
    with pytest.raises(DataError, match=f"array dataset: file not found: {tmp_path / 'x.npz'}"):
        build_benchmark("array", tmp_path / "x.npz", 2)
    with pytest.raises(DataError, match="cifar100: not found or corrupt under .*download=true"):
        build_benchmark("cifar100", tmp_path / "cifar", 10)
    np.savez(tmp_path / "bad.npz", train_x=np.zeros((2, 4, 4), np.uint8), train_y=np.zeros(2))
    with pytest.raises(DataError, match=r"missing arrays \['test_x', 'test_y'\]"):
        build_benchmark("array", tmp_path / "bad.npz", 1)


def test_array_npz_grayscale_and_per_class_subsets(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", train_x=rng.integers(0, 255, (40, 8, 8), dtype=np.uint8),
             train_y=np.repeat(np.arange(4), 10), test_x=rng.integers(0, 255, (8, 8, 8), dtype=np.uint8),
             test_y=np.repeat(np.arange(4), 2))
    bench = build_benchmark("array", tmp_path / "d.npz", 2, image_size=16, train_per_class=3)
    assert len(bench.train_set(0)) == 6 and len(bench.test_set(1)) == 4
    assert bench.train_set(0)[0][0].shape == (3, 16, 16)  # grayscale -> 3 channels



def _fixed_task_npz(path, **extra):
    rng = np.random.default_rng(0)
    np.savez(path, train_x=rng.integers(0, 255, (60, 8, 8), dtype=np.uint8), train_y=np.repeat(np.arange(6), 10),
             test_x=rng.integers(0, 255, (12, 8, 8), dtype=np.uint8), test_y=np.repeat(np.arange(6), 2), **extra)


def test_array_npz_task_groups_fix_the_tasks(tmp_path):
    """Each task holds exactly one row of task_groups; the seed shuffles only the order of the rows."""
    groups = np.array([[5, 0], [1, 3], [2, 4]])
    _fixed_task_npz(tmp_path / "g.npz", task_groups=groups, task_names=np.array(["digits", "cifar_a", "cifar_b"]))
    for seed in range(4):
        bench = build_benchmark("array", tmp_path / "g.npz", 3, seed=seed, image_size=16, transforms="per_dataset")
        original = [sorted(bench.class_order[c] for c in classes) for classes in bench.task_classes]
        assert sorted(original) == sorted(sorted(row) for row in groups.tolist())
        names = {(0, 5): "digits", (1, 3): "cifar_a", (2, 4): "cifar_b"}
        expected = tuple("cifar" if "cifar" in names[tuple(o)] else "generic" for o in original)
        assert bench.recipes == expected and bench.info()["datasets"] == ["digits", "cifar_a", "cifar_b"]
    with pytest.raises(DataError, match="set data.num_tasks=3"):
        build_benchmark("array", tmp_path / "g.npz", 2)


@pytest.mark.parametrize("extra, message", [
    ({"task_groups": np.array([[0, 1], [2, 3], [4, 4]])}, "each class 0..5 exactly once"),
    ({"task_groups": np.array([0, 1, 2, 3, 4, 5])}, "task_groups has shape"),
    ({"task_groups": np.arange(6).reshape(3, 2), "task_names": np.array(["a", "b"])}, "2 task_names for 3"),
    ({"task_names": np.array(["a", "b", "c"])}, "task_names without task_groups"),
])
def test_array_npz_bad_task_groups_are_named(tmp_path, extra, message):
    _fixed_task_npz(tmp_path / "g.npz", **extra)
    with pytest.raises(DataError, match=message):
        build_benchmark("array", tmp_path / "g.npz", 3)

def test_cifar100_torchvision_layout(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 200), ("test", 100)):
        data = {"data": rng.integers(0, 255, (n, 3072), dtype=np.uint8),
                "fine_labels": [i % 100 for i in range(n)], "coarse_labels": [0] * n}
        with open(folder / split, "wb") as f:
            pickle.dump(data, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)]}, f)
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)  # fixture md5 sums differ
    monkeypatch.setattr(tv_cifar.CIFAR100, "_check_integrity", lambda self: True)
    bench = build_benchmark("cifar100", tmp_path, 10, image_size=32)
    assert bench.num_classes == 100 and len(bench.train_set(0)) == 20 and len(bench.test_set(9)) == 10


def test_real_cifar100_npz(shared_dir):
    path = shared_dir / "data" / "cifar100.npz"
    if not path.is_file():
        pytest.skip("cifar100.npz absent")
    bench = build_benchmark("array", path, 10, image_size=32)
    assert bench.info()["num_train"] == 50_000 and bench.info()["num_test"] == 10_000
    assert bench.num_classes == 100 and len(bench.test_set(3)) == 1000


def test_test_transform_is_resize_center_crop_normalise_by_hand():
    import torch
    from PIL import Image

    from norga.data import build_transforms

    pixels = np.random.RandomState(0).randint(0, 256, (40, 60, 3), dtype=np.uint8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    out = build_transforms(32, mean, std, train=False)(Image.fromarray(pixels))
    # by hand: shorter side to round(256/224 * 32) = 37 (so 55 x 37), centre crop 32 x 32, /255, normalise
    resized = np.asarray(Image.fromarray(pixels).resize((55, 37), Image.BILINEAR), dtype=np.float32) / 255
    top, left = int(round((37 - 32) / 2)), int(round((55 - 32) / 2))
    crop = torch.from_numpy(resized[top:top + 32, left:left + 32]).permute(2, 0, 1)
    expected = (crop - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    assert out.shape == (3, 32, 32)
    assert torch.allclose(out, expected, atol=1e-6)


def test_train_transform_is_random_but_seeded():
    import torch
    from PIL import Image

    from norga.data import build_transforms

    img = Image.fromarray(np.random.RandomState(1).randint(0, 256, (48, 48, 3), dtype=np.uint8))
    tf = build_transforms(24, (0.5,) * 3, (0.5,) * 3, train=True)
    torch.manual_seed(0)
    a, b = tf(img), tf(img)
    torch.manual_seed(0)
    again = tf(img)
    assert a.shape == (3, 24, 24) and not torch.equal(a, b) and torch.equal(a, again)
    assert a.min() >= -1 - 1e-6 and a.max() <= 1 + 1e-6  # (x - 0.5) / 0.5 of x in [0, 1]
