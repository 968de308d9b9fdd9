"""Image transforms as the reference code: RandomResizedCrop + flip for training,
Resize(256/224 * size) + CenterCrop for testing; mean/std from the backbone's timm config."""
from __future__ import annotations

from typing import Sequence

from torchvision import transforms as T


def build_transforms(image_size: int, mean: Sequence[float], std: Sequence[float], train: bool):
    """PIL RGB image -> normalised float tensor (3, image_size, image_size)."""
    normalize = [T.ToTensor(), T.Normalize(tuple(mean), tuple(std))]
    if train:
        return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), *normalize])
    return T.Compose([T.Resize(int(round(256 / 224 * image_size))), T.CenterCrop(image_size), *normalize])
