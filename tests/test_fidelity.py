"""Fidelity options (docs/fidelity.md): each checked against numbers worked out by hand or by the authors' setup."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

from conftest import REPO_ROOT as REPO
from norga.config import ConfigError, load_config
from norga.toolkit.heads import TaskIdentityHead, init_linear_layers
from norga.toolkit.schedules import epoch_scheduler, lr_factor
from norga.toolkit.stages import contrastive_regulariser, official_contrastive_regulariser
from norga.data.benchmark import grouped_class_order, resolve_class_order
from norga.data.transforms import CIFAR_MEAN, CIFAR_STD, build_transforms, task_recipes
from norga.config.fidelity import ITEMS, KEPT_OURS, differing_items, fidelity_report

PAPER_CONFIGS = sorted(REPO.glob("configs/*_norga.yaml")) + sorted(REPO.glob("configs/*_hideprompt.yaml"))


# ---- 2. the authors' regulariser -------------------------------------------------------------------------------
def _ce_rows_by_hand(M):
    """mean_r [ -s_rr + log sum_j exp(s_rj) ], s = M M^T / 0.8, written out with math only."""
    total = 0.0
    for r in range(len(M)):
        s = [sum(a * b for a, b in zip(M[r], M[j])) / 0.8 for j in range(len(M))]
        total += -s[r] + math.log(sum(math.exp(v) for v in s))
    return total / len(M)


FEATS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]  # 3 x 2 batch features
PROTOS = [[2.0, 0.0]]  # one old class mean


def test_official_regulariser_on_3x2_without_old_classes_by_hand():
    # s = [[1,0,1],[0,1,1],[1,1,2]] / 0.8: row 0: -1.25 + log(e^1.25 + 1 + e^1.25), etc.
    expected = ((-1.25 + math.log(2 * math.exp(1.25) + 1)) * 2
                + (-2.5 + math.log(2 * math.exp(1.25) + math.exp(2.5)))) / 3
    assert expected == pytest.approx(_ce_rows_by_hand(FEATS))
    got = official_contrastive_regulariser(torch.tensor(FEATS), None, 0.8)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_official_regulariser_puts_the_old_class_means_into_the_ce_rows():
    got = official_contrastive_regulariser(torch.tensor(FEATS), torch.tensor(PROTOS), 0.8)
    assert got.item() == pytest.approx(_ce_rows_by_hand(PROTOS + FEATS), rel=1e-6)
    # unnormalised: scaling the features changes the loss (eq. 56's normalised form would not)
    scaled = official_contrastive_regulariser(2 * torch.tensor(FEATS), torch.tensor(PROTOS), 0.8)
    assert scaled.item() != pytest.approx(got.item(), rel=1e-3)
    assert contrastive_regulariser(torch.tensor(FEATS), None, 0.8).item() == 0.0  # eq. 56 is off on task 0


# ---- 8. class order ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, first_ten", [
    (42, [42, 41, 91, 9, 65, 50, 1, 70, 15, 78]),
    (40, [8, 28, 21, 83, 24, 54, 48, 77, 23, 73]),
    (44, [54, 31, 82, 46, 25, 63, 70, 10, 32, 26]),
])
def test_cifar100_class_order_matches_the_authors_python_shuffle(seed, first_ten):
    order = resolve_class_order("seed", 100, seed, "python")
    assert order[:10] == first_ten and sorted(order) == list(range(100))
    assert resolve_class_order("seed", 100, seed, "numpy")[:10] != first_ten


def test_five_datasets_seed_42_shuffles_the_task_order_like_the_authors():
    names = ["svhn", "mnist", "cifar10", "notmnist", "fashion_mnist"]
    groups = [list(range(10 * t, 10 * t + 10)) for t in range(5)]
    order = grouped_class_order("seed", groups, 42, "python")
    tasks = [names[order[10 * t] // 10] for t in range(5)]
    assert tasks == ["notmnist", "mnist", "cifar10", "fashion_mnist", "svhn"]
    assert all(order[10 * t:10 * t + 10] == sorted(order[10 * t:10 * t + 10]) for t in range(5))
    assert task_recipes("official", "five_datasets", tasks) == ("generic", "generic", "cifar", "cifar", "cifar")
    assert task_recipes("per_dataset", "five_datasets", tasks) == ("generic", "generic", "cifar", "generic", "generic")


# ---- 5. heads --------------------------------------------------------------------------------------------------
def _layer_norm(v):
    v = np.asarray(v, dtype=np.float64)
    return (v - v.mean()) / math.sqrt(v.var() + 1e-5)


def test_official_tii_head_is_post_ln_residual_by_hand():
    head = TaskIdentityHead(2, 3, [1], style="official")
    W1, b1, W2, b2 = [[1.0, 2.0], [0.5, -1.0]], [0.0, 0.5], [[1.0, 0.0], [2.0, 1.0]], [0.1, -0.1]
    Wc, bc = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.0, 0.0, 1.0]
    mapping = head.blocks.net
    with torch.no_grad():
        for layer, W, b in ((mapping[0], W1, b1), (mapping[2], W2, b2), (head.fc, Wc, bc)):
            layer.weight.copy_(torch.tensor(W)), layer.bias.copy_(torch.tensor(b))
    x = [0.3, -0.7]
    gelu = lambda z: 0.5 * z * (1 + math.erf(z / math.sqrt(2)))
    hidden = [gelu(sum(w * xi for w, xi in zip(row, x)) + bi) for row, bi in zip(W1, b1)]
    inner = [sum(w * h for w, h in zip(row, hidden)) + bi for row, bi in zip(W2, b2)]
    mapped = _layer_norm([xi + ii for xi, ii in zip(x, inner)])
    expected = [sum(w * m for w, m in zip(row, mapped)) + bi for row, bi in zip(Wc, bc)]
    got = head(torch.tensor([x])).detach()[0]
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float32), atol=1e-5)


def test_official_tii_mapping_for_4_4_is_one_block_with_an_inner_layer_norm():
    net = TaskIdentityHead(8, 5, [4, 4], style="official").blocks.net
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Linear", "GELU", "Linear", "LayerNorm", "Linear"]
    assert [tuple(m.weight.shape) for m in net if isinstance(m, torch.nn.Linear)] == [(32, 8), (32, 32), (8, 32)]
    pre = TaskIdentityHead(8, 5, [4, 4], style="pre_norm").blocks
    assert len(pre) == 2  # one pre-norm block per ratio


def test_head_init_trunc_normal_zero_bias_vs_pytorch_default():
    torch.manual_seed(0)
    layer = init_linear_layers(torch.nn.Linear(512, 512), "trunc_normal")
    assert layer.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.count_nonzero(layer.bias) == 0
    default = init_linear_layers(torch.nn.Linear(512, 512), "pytorch")
    assert default.weight.std().item() == pytest.approx(1 / math.sqrt(3 * 512), rel=0.05)  # U(+-1/sqrt(fan_in))
    assert torch.count_nonzero(default.bias) > 0


# ---- 12. schedules ------------------------------------------------------------------------------------------
def test_step_schedule_timm_stepping_first_decays_the_32nd_epoch():
    timm_lrs = [lr_factor(e, "step", 50, [30], 0.1, stepping="timm") for e in range(50)]
    torch_lrs = [lr_factor(e, "step", 50, [30], 0.1, stepping="torch") for e in range(50)]
    assert timm_lrs[:31] == [1.0] * 31 and timm_lrs[31:] == pytest.approx([0.1] * 19)
    assert torch_lrs[:30] == [1.0] * 30 and torch_lrs[30:] == pytest.approx([0.1] * 20)


def test_cosine_schedule_matches_timm_values_in_both_groups():
    # ImageNet-R: base 0.03 * 128/256 = 0.015, head 0.1 x that, lr_min 1e-5 absolute for both groups.
    # Reference values: timm 0.6.7's CosineLRScheduler(t_initial=150, lr_min=1e-5) stepped as the authors' loop.
    params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    opt = torch.optim.SGD([{"params": [params[0]], "lr": 0.015}, {"params": [params[1]], "lr": 0.0015}], lr=0.015)
    sched = epoch_scheduler(opt, "cosine", 150, min_lr=1e-5, stepping="timm")
    lrs = []
    for _ in range(150):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step(), sched.step()
    assert lrs[0][0] == lrs[1][0] == pytest.approx(0.015)
    assert lrs[2][0] == pytest.approx(0.01499836, abs=1e-8)
    assert lrs[75][0] == pytest.approx(0.00766196, abs=1e-8)
    assert lrs[149][0] == pytest.approx(1.657e-05, abs=1e-8)
    head_149 = 1e-5 + 0.5 * (0.0015 - 1e-5) * (1 + math.cos(math.pi * 148 / 150))
    assert lrs[149][1] == pytest.approx(head_149, rel=1e-9)


# ---- 7. transforms ------------------------------------------------------------------------------------------
def _describe(tf):
    out = []
    for t in tf.transforms:
        if isinstance(t, T.RandomResizedCrop):
            out.append(("RRC", t.size, tuple(t.scale), t.interpolation))
        elif isinstance(t, T.Resize):
            out.append(("Resize", t.size, t.interpolation))
        elif isinstance(t, T.CenterCrop):
            out.append(("CenterCrop", t.size))
        elif isinstance(t, T.ColorJitter):
            out.append(("Jitter", tuple(round(v, 6) for v in t.brightness)))
        elif isinstance(t, T.Normalize):
            out.append(("Normalize", tuple(t.mean), tuple(t.std)))
        else:
            out.append((type(t).__name__,))
    return out


BICUBIC, BILINEAR = InterpolationMode.BICUBIC, InterpolationMode.BILINEAR


def test_transform_lists_per_recipe():
    b = 63 / 255
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, True, "cifar")) == [
        ("RRC", (224, 224), (0.08, 1.0), BICUBIC), ("RandomHorizontalFlip",),
        ("Jitter", (round(1 - b, 6), round(1 + b, 6))),
        ("ToTensor",), ("Normalize", CIFAR_MEAN, CIFAR_STD)]
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, False, "cifar")) == [
        ("Resize", 256, BICUBIC), ("CenterCrop", (224, 224)), ("ToTensor",), ("Normalize", CIFAR_MEAN, CIFAR_STD)]
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, True, "generic")) == [
        ("RRC", (224, 224), (0.05, 1.0), BILINEAR), ("RandomHorizontalFlip",), ("ToTensor",)]
    assert _describe(build_transforms(84, (0.5,) * 3, (0.5,) * 3, False, "generic")) == [
        ("Resize", 96, BICUBIC), ("CenterCrop", (84, 84)), ("ToTensor",)]
    assert _describe(build_transforms(224, (0.1,) * 3, (0.2,) * 3, False, "backbone"))[-1] == (
        "Normalize", (0.1,) * 3, (0.2,) * 3)


def test_generic_test_transform_by_hand_has_no_normalisation():
    pixels = np.random.RandomState(0).randint(0, 256, (40, 60, 3), dtype=np.uint8)
    out = build_transforms(32, (0.5,) * 3, (0.5,) * 3, False, "generic")(Image.fromarray(pixels))
    # shorter side to int(256/224 * 32) = 36 (54 x 36), bicubic; centre crop 32; /255; no Normalize
    resized = np.asarray(Image.fromarray(pixels).resize((54, 36), Image.BICUBIC), dtype=np.float32) / 255
    top, left = 2, 11
    expected = torch.from_numpy(resized[top:top + 32, left:left + 32]).permute(2, 0, 1)
    assert torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("bench_name, recipe", [("cifar100", "cifar"), ("imagenet_r", "generic"),
                                               ("cub200", "generic"), ("array", "backbone"), ("synthetic", "backbone")])
def test_official_recipe_per_benchmark(bench_name, recipe):
    assert task_recipes("official", bench_name, ["", ""]) == (recipe, recipe)
    assert task_recipes("backbone", bench_name, ["", ""]) == ("backbone", "backbone")


# ---- configs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: p.name)
def test_shipped_paper_configs_follow_the_authors_item_by_item(path):
    cfg = load_config(path)
    assert [item.key for item in differing_items(cfg)] == list(KEPT_OURS)
    report = fidelity_report(cfg)
    assert sum(line.endswith(": authors' code") for line in report.splitlines()) == len(ITEMS) - len(KEPT_OURS)


def test_paper_choices_are_reported_as_not_the_authors():
    cfg = load_config(None, ["method.wtp.reg_form=eq56", "method.wtp.label_smoothing=0.1",
                             "data.class_order_rng=numpy"])
    keys = [item.key for item in differing_items(cfg)]
    assert {"method.wtp.reg_form", "method.wtp.label_smoothing", "data.class_order_rng"} <= set(keys)
    assert "method.wtp.reg_form = 'eq56': NOT the authors'" in fidelity_report(cfg)


def test_tap_after_the_first_task_needs_all_batches():
    with pytest.raises(ConfigError, match="method.tap.batches=all"):
        load_config(None, ["method.tap.after_first_task=true"])
    assert load_config(None, ["method.tap.after_first_task=true", "method.tap.batches=all"]).method.tap.after_first_task


def test_coda_recipes_follow_the_official_coda_prompt_code():
    """GT-RIPL/CODA-Prompt 6417d4f dataloaders/utils.py at size 224: RRC(224) + flip, Resize(224) for CIFAR,
    Resize(256) + CenterCrop(224) for ImageNet-R; Normalize(mean 0, std 1), i.e. none."""
    train = [("RRC", (224, 224), (0.08, 1.0), BILINEAR), ("RandomHorizontalFlip",), ("ToTensor",)]
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, True, "coda_cifar")) == train
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, True, "coda_imagenet")) == train
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, False, "coda_cifar")) == [
        ("Resize", 224, BILINEAR), ("ToTensor",)]
    assert _describe(build_transforms(224, (0.5,) * 3, (0.5,) * 3, False, "coda_imagenet")) == [
        ("Resize", 256, BILINEAR), ("CenterCrop", (224, 224)), ("ToTensor",)]


def test_coda_cifar_test_transform_by_hand():
    pixels = np.random.RandomState(1).randint(0, 256, (32, 32, 3), dtype=np.uint8)
    out = build_transforms(56, (0.5,) * 3, (0.5,) * 3, False, "coda_cifar")(Image.fromarray(pixels))
    expected = np.asarray(Image.fromarray(pixels).resize((56, 56), Image.BILINEAR), dtype=np.float32) / 255
    assert out.shape == (3, 56, 56)
    assert torch.allclose(out, torch.from_numpy(expected).permute(2, 0, 1), atol=1e-6)
