"""The CI-sized stand-in for ``../shared``: ``python -m crosscheck.harness.ci_task --out DIR``.

CI has neither the DINOv2 weights nor CIFAR-100, so every norga side (``--shared DIR``) runs there on a folder of
the same layout made here from fixed seeds:

* ``DIR/weights/dinov2_vits14_imgfocus.safetensors``: timm's ``vit_small_patch14_dinov2`` (the real file's
  architecture: ViT-S/14, 384 wide, layer scale, position embeddings for 518 px = 37 x 37 patches) made small
  for CI by ``TIMM_KWARGS`` (5 blocks, the fewest any side addresses, and an MLP 384 wide), randomly initialised
  by timm under ``torch.manual_seed(seed)``, stored in float16 as the real file is; beside it
  ``backbone_overrides.txt`` names those kwargs, which ``norga_inputs.method_of`` adds to every config;
* ``DIR/data/cifar100.npz``: 100 classes of uniform random 32 x 32 RGB images, ``TRAIN_PER_CLASS`` training and
  ``TEST_PER_CLASS`` test images each (``train_x`` (2000, 32, 32, 3) uint8, ``train_y`` (2000,) int64, ``test_x``
  (1000, 32, 32, 3), ``test_y`` (1000,)), classes interleaved in a seeded order as CIFAR's are.

The numbers a norga side writes from it mean nothing; running it proves that the side still drives the method
end to end (``tests/test_crosscheck_sides.py``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from crosscheck.harness.norga_cli import BACKBONE_OVERRIDES, WEIGHTS

CLASSES, TRAIN_PER_CLASS, TEST_PER_CLASS = 100, 20, 10
ARCHITECTURE = "vit_small_patch14_dinov2"
TIMM_KWARGS = {"depth": 5, "mlp_ratio": 1.0}  # blocks 0-4 carry the prompts / LoRAs of the checks


def synthetic_cifar(seed: int = 0) -> dict:
    """Random uint8 images (N, 32, 32, 3) and int64 labels (N,) of ``CLASSES`` classes, the classes' images
    interleaved in a seeded order."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, per_class in (("train", TRAIN_PER_CLASS), ("test", TEST_PER_CLASS)):
        labels = rng.permutation(np.repeat(np.arange(CLASSES, dtype=np.int64), per_class))
        out[f"{split}_x"] = rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8)
        out[f"{split}_y"] = labels
    return out


def random_backbone(seed: int = 0) -> dict:
    """The state dict (float16 tensors) of a randomly initialised ``ARCHITECTURE`` (``TIMM_KWARGS``), no head."""
    import timm

    torch.manual_seed(seed)
    vit = timm.create_model(ARCHITECTURE, pretrained=False, num_classes=0, **TIMM_KWARGS)
    return {k: v.detach().to(torch.float16).contiguous() for k, v in vit.state_dict().items()}


def make_shared(folder: Path, seed: int = 0) -> Path:
    """Write the stand-in into ``folder`` (its ``weights/`` and ``data/``) and return ``folder``."""
    from safetensors.torch import save_file

    (folder / WEIGHTS).parent.mkdir(parents=True, exist_ok=True)
    save_file(random_backbone(seed), str(folder / WEIGHTS))
    kwargs = ", ".join(f"{k}: {v}" for k, v in TIMM_KWARGS.items())
    (folder / WEIGHTS).with_name(BACKBONE_OVERRIDES).write_text(f"model.timm_kwargs={{{kwargs}}}\n")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data" / "cifar100.npz", **synthetic_cifar(seed))
    return folder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the folder to pass as --shared")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(f"wrote {make_shared(args.out, args.seed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
