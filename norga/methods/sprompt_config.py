"""Config section of the ``sprompt`` method: S-Prompts with one common head (torch-free).

Wang, Huang, Hong, "S-Prompts Learning with Pre-trained Transformers" (NeurIPS 2022), adapted to
class-incremental learning as the NoRGa paper's Appendix D says: one prompt per task, one common
classifier head, the task of a test sample = the task of its nearest K-means centroid of frozen
features. Defaults follow the official code (iamwangyabin/S-Prompts, ``methods/sprompt.py`` and
``models/sinet.py``) where it has a value; README "Methods" lists every difference.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import MethodConfig, _f, method_config


@method_config("sprompt", module="norga.methods.sprompt")
@dataclass
class SPromptConfig(MethodConfig):
    """S-Prompts with one common head: a token prompt per task, chosen per sample by the nearest K-means centroid."""

    name: str = _f("sprompt")
    prompt_length: int = _f(10, ge=1)  # tokens prepended after the class token at block 0 (official: 10)
    # official: fresh nn.Linear-style init per task, U(-1/sqrt(D), 1/sqrt(D)); previous: copy the last prompt
    prompt_init: str = _f("official", choices=("official", "previous"))
    centroids_per_task: int = _f(5, ge=1)  # official: KMeans(n_clusters=5)
    # l1: sum_i |x_i - c_i| (official code: ((x - c) ** 2) ** 0.5 summed); l2: Euclidean
    distance: str = _f("l1", choices=("l1", "l2"))
    normalize_query: bool = _f(True)  # official: L2-normalised frozen class token, for K-means and selection
    # selected_task: a test sample's class is the argmax over the classes of its selected task (official: the
    # selected task's classifier); seen_classes: all seen classes of the common head compete
    classify_within: str = _f("selected_task", choices=("selected_task", "seen_classes"))
    epochs: int = _f(20, ge=0)  # official ViT config is unusable (see README); 20 = NoRGa authors' CIFAR setting
    lr: float = _f(0.01, gt=0.0)  # official: 0.01
    batch_size: int = _f(128, ge=1)  # official: 128
    optimizer: str = _f("sgd", choices=("sgd", "adam"))  # official: SGD momentum 0.9
    weight_decay: float = _f(2e-4, ge=0.0)  # official: 2e-4 after the first task
    schedule: str = _f("cosine", choices=("cosine", "constant"))  # official: CosineAnnealingLR over the epochs
    # classifier init: trunc_normal(0.02), bias 0, or PyTorch's default
    head_init: str = _f("trunc_normal", choices=("trunc_normal", "pytorch"))
