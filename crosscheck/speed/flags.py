"""The NoRGa authors' command lines for the speed report's small task (no torch, no norga import).

Their script ``scripts/cifar100_DINO_NoRGa.sh`` with the protocol's two changes (docs/crosscheck.md: 5 training
epochs per stage, batch 20, each lr they scale by batch/256 set to keep their per-step lr) and the CPU flags. norga's
side runs ``configs/crosscheck/norga.yaml`` with the same values; tests/test_speed_report.py checks that they agree.
"""
from __future__ import annotations

from pathlib import Path
from typing import List

BATCH, EPOCHS, TASKS = 20, 5, 5
# stage 1 (--train_inference_task_only): lr and ca_lr are multiplied by batch/256 in their trainer
STAGE1 = {"lr": 0.0032, "ca_lr": 0.32, "crct_epochs": 30}  # script: 0.0005 and 0.05 at batch 128 -> x 128/20
# stage 2: lr x batch/256 (script default 0.03 at batch 128 -> x 128/20), ca_lr unscaled, crct_epochs their default
STAGE2 = {"lr": 0.192, "ca_lr": 0.005, "crct_epochs": 80, "prompt_momentum": 0.1, "reg": 0.1, "length": 5}
MODEL = "vit_small_patch14_dinov2_xc"  # a name only: speed_reference.py's create_model builds the small ViT


def reference_flags(stage: int, data: Path, work: Path, seed: int, image_size: int = 56) -> List[str]:
    """``main.py`` arguments of ``stage`` (1 or 2); checkpoints go to ``work/stage1`` and ``work/stage2``."""
    common = ["cifar100_norgaprompt", "--original_model", MODEL, "--model", MODEL, "--batch-size", str(BATCH),
              "--epochs", str(EPOCHS), "--data-path", str(data), "--dataset", "Split-CIFAR50xc", "--seed", str(seed),
              "--shuffle", "True", "--input-size", str(image_size), "--num_tasks", str(TASKS), "--size", str(TASKS),
              "--ca_storage_efficient_method", "covariance", "--device", "cpu", "--num_workers", "0",
              "--no-pin-mem"]
    if stage == 1:
        return common + ["--train_inference_task_only", "--output_dir", str(work / "stage1"),
                         *(f for k, v in STAGE1.items() for f in (f"--{k}", str(v)))]
    return common + ["--larger_prompt_lr", "--reset", "--trained_original_model", str(work / "stage1"),
                     "--output_dir", str(work / "stage2"), *(f for k, v in STAGE2.items() for f in (f"--{k}", str(v)))]
