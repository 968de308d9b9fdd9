"""Image transform recipes (``data.transforms``): PIL RGB image -> float tensor (3, size, size).

A recipe builds the train and the test transform for an image size. Registered:

* ``cifar`` — the authors' CIFAR recipe (their ``build_cifar_transform``; also
  the CIFAR-10 task of 5-Datasets). Train: RandomResizedCrop(size, bicubic),
  horizontal flip, ColorJitter(brightness=63/255), ToTensor, Normalize(CIFAR
  mean/std). Test: Resize(int(256/224 * size), bicubic), CenterCrop(size),
  ToTensor, the same Normalize.
* ``generic`` — the authors' recipe for every other dataset (their
  ``build_transform``: ImageNet-R, CUB-200, the non-CIFAR 5-Datasets tasks).
  Train: RandomResizedCrop(size, scale=(0.05, 1), bilinear), flip, ToTensor —
  **no normalisation**. Test: Resize(int(256/224 * size), bicubic),
  CenterCrop(size), ToTensor.
* ``backbone`` — norga's own: RandomResizedCrop(size) (bilinear), flip; test
  Resize(round(256/224 * size)) (bilinear), CenterCrop; both normalised with
  the backbone's own mean/std (timm's pretrained config).
* ``plain`` — no augmentation: train = test = ``backbone``'s test transform.
* ``coda_cifar`` / ``coda_imagenet`` — the official CODA-Prompt code's recipes
  (GT-RIPL/CODA-Prompt 6417d4f, ``dataloaders/utils.py``), with its 224 px
  written as ``size``. Train: RandomResizedCrop(size) (bilinear, scale 0.08-1),
  flip, ToTensor. Test: ``coda_cifar`` Resize(size), ToTensor;
  ``coda_imagenet`` Resize(round(256/224 * size)), CenterCrop(size), ToTensor.
  **No normalisation** on either (their Normalize has mean 0, std 1).

Differences from the authors' code we keep on purpose: their CIFAR train crop
is hard-coded to 224 px (ours: ``size``), and their test transform skips the
resize and crop for size <= 32 (ours always resizes and crops; identical for
every size > 32, which covers every paper config).

``data.transforms: official`` picks each benchmark's recipe as the authors'
code does (:data:`OFFICIAL_RECIPES`). For 5-Datasets that is ``generic`` until
the CIFAR-10 task and ``cifar`` for CIFAR-10 **and every later task** (their
loop assigns the CIFAR transform and never resets it; with seed 42 their task
order is notMNIST, MNIST, CIFAR-10, Fashion-MNIST, SVHN, so the last three get
the CIFAR recipe). ``data.transforms: per_dataset`` gives the CIFAR recipe to
the CIFAR-10 task only (what their code presumably meant). Benchmarks without
an authors' recipe (``array``, ``synthetic``) use ``backbone`` under
``official``; set ``data.transforms: cifar`` for a CIFAR ``.npz``.
Gaussian statistics and evaluation always use the test transform.
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

from ..registry import registrar
from .sources import DataError

CIFAR_MEAN, CIFAR_STD = (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)  # authors' CIFAR Normalize
BICUBIC = InterpolationMode.BICUBIC

Recipe = Callable[[int, bool, Sequence[float], Sequence[float]], T.Compose]
RECIPES: Dict[str, Recipe] = {}


def _cifar_from_first_cifar_task(components: Sequence[str]) -> Tuple[str, ...]:
    """Authors' 5-Datasets: ``generic`` before the first CIFAR task, ``cifar`` from it on."""
    first = next((i for i, c in enumerate(components) if "cifar" in c), len(components))
    return tuple("generic" if i < first else "cifar" for i in range(len(components)))


def _cifar_for_cifar_tasks(components: Sequence[str]) -> Tuple[str, ...]:
    return tuple("cifar" if "cifar" in c else "generic" for c in components)


# benchmark name -> recipe name for every task, or a function of the tasks' source datasets
OFFICIAL_RECIPES: Dict[str, object] = {
    "cifar100": "cifar",
    "imagenet_r": "generic",
    "cub200": "generic",
    "five_datasets": _cifar_from_first_cifar_task,
}


register_recipe = registrar(RECIPES, "transform recipe")  # decorator: @register_recipe("name")


def _authors_test(size: int, normalize: list) -> T.Compose:
    return T.Compose([T.Resize(int((256 / 224) * size), interpolation=BICUBIC), T.CenterCrop(size), T.ToTensor(),
                      *normalize])


@register_recipe("cifar")
def cifar_recipe(size: int, train: bool, mean=None, std=None) -> T.Compose:
    normalize = [T.Normalize(CIFAR_MEAN, CIFAR_STD)]
    if train:
        return T.Compose([T.RandomResizedCrop(size, interpolation=BICUBIC), T.RandomHorizontalFlip(),
                          T.ColorJitter(brightness=63 / 255), T.ToTensor(), *normalize])
    return _authors_test(size, normalize)


@register_recipe("generic")
def generic_recipe(size: int, train: bool, mean=None, std=None) -> T.Compose:
    if train:
        return T.Compose([T.RandomResizedCrop(size, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
                          T.RandomHorizontalFlip(p=0.5), T.ToTensor()])
    return _authors_test(size, [])


@register_recipe("backbone")
def backbone_recipe(size: int, train: bool, mean: Sequence[float], std: Sequence[float]) -> T.Compose:
    normalize = [T.ToTensor(), T.Normalize(tuple(mean), tuple(std))]
    if train:
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *normalize])
    return T.Compose([T.Resize(int(round(256 / 224 * size))), T.CenterCrop(size), *normalize])


@register_recipe("plain")
def plain_recipe(size: int, train: bool, mean: Sequence[float], std: Sequence[float]) -> T.Compose:
    """No augmentation: training images get the ``backbone`` test transform (resize, centre crop, normalise).

    For short budgets, where a head trained on augmented images would be compared with
    one trained on clean cached features (see bench/real_data_cpu.py).
    """
    return backbone_recipe(size, False, mean, std)


@register_recipe("coda_cifar")
def coda_cifar_recipe(size: int, train: bool, mean=None, std=None) -> T.Compose:
    if train:
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor()])
    return T.Compose([T.Resize(size), T.ToTensor()])


@register_recipe("coda_imagenet")
def coda_imagenet_recipe(size: int, train: bool, mean=None, std=None) -> T.Compose:
    if train:
        return coda_cifar_recipe(size, True)
    return T.Compose([T.Resize(int(round(256 / 224 * size))), T.CenterCrop(size), T.ToTensor()])


def build_transforms(image_size: int, mean: Sequence[float], std: Sequence[float], train: bool,
                     recipe: str = "backbone") -> T.Compose:
    """The ``recipe``'s train or test transform at ``image_size`` (mean/std used by ``backbone`` only)."""
    if recipe not in RECIPES:
        raise DataError(f"data.transforms: unknown recipe {recipe!r}; registered: {sorted(RECIPES)}, 'official' or "
                        "'per_dataset'")
    return RECIPES[recipe](image_size, train, mean, std)


def task_recipes(choice: str, benchmark: str, task_components: Sequence[str]) -> Tuple[str, ...]:
    """Recipe name per task. ``task_components``: the source dataset of each task ("" for split benchmarks)."""
    if choice == "per_dataset":
        return _cifar_for_cifar_tasks(task_components)
    if choice != "official":
        if choice not in RECIPES:
            raise DataError(f"data.transforms: unknown recipe {choice!r}; registered: {sorted(RECIPES)}, "
                            "'official' or 'per_dataset'")
        return tuple(choice for _ in task_components)
    official = OFFICIAL_RECIPES.get(benchmark, "backbone")
    if isinstance(official, str):
        return tuple(official for _ in task_components)
    return official(task_components)
