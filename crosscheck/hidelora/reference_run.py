"""The reference HiDe-LoRA on the cross-check's small task, both of its runs, with a reference environment (timm 0.6.7):

    python -m crosscheck.hidelora.reference_run --ref CHECKOUT --saved DIR --data NPZ --seed S --out FILE.json

CHECKOUT is ivcylc/HiDe-PET (131f7ce), DIR what ``python -m crosscheck.hidelora.norga_side`` wrote (the
converted DINOv2 ViT-S/14 at 56 px), NPZ what ``python -m crosscheck.harness.small_task`` wrote. As its README does,

1. the task-identity model: ``engines/continual_pet_engine.py``'s ``train_and_evaluate`` on its
   ``VisionTransformer(lora_type='continual')`` with the README's ``imr_continual_lora`` values (``CONTINUAL``),
   writing its per-task checkpoints into a scratch folder;
2. HiDe-LoRA: ``engines/hide_lora_wtp_and_tap_engine.py``'s ``train_and_evaluate`` with ``lora_type='hide'`` and
   those checkpoints as ``--trained_original_model``, with the README's ``imr_hidelora`` values (``HIDELORA``);

both at the protocol's 5 epochs and batch 20, each run seeded as its ``main.py`` seeds (torch, numpy, random).
Around them this script supplies what the trainers and ``build_continual_dataloader`` would: the models built and
frozen as the trainers do, given norga's converted backbone (heads keep the model's own init); the trainers' lr
scaling (lr x batch / 256) and first optimizers; the small task's images with the class order norga draws for the
seed, labels renumbered in that order; norga's ``cifar`` transforms (training loaders augmented, per-class loaders
not, as its ``dataset_train_mean``). Its engines call ``dist.barrier`` / ``dist.all_gather`` and HiDe-LoRA's
factor momentum reads ``model.module``, so torch.distributed runs as one gloo process and the HiDe-LoRA model is
wrapped in ``DistributedDataParallel`` as its trainer does under ``--distributed``. One CPU patch, in memory: its
``utils.MetricLogger.synchronize_between_processes`` (the logged meters' all-reduce, on a CUDA tensor) does nothing
(with one process that all-reduce is the identity). The engines' ``evaluate_till_now`` is wrapped to record the
accuracy matrix it fills, and ``SimpleNamespace`` (its args inside its checkpoints) is allowed to torch's
``weights_only`` loading, the default since torch 2.6. Writes the matrix after each
task's final evaluation (row = after task t, column = task, %) and FA (%).
"""
from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from crosscheck.hidelora.reference_side import FREEZE
from crosscheck.harness.reference_cli import reference_args, reference_vit, run_options, write_result

TASKS, PER_TASK, BATCH = 5, 10, 20
COMMON = {"batch_size": BATCH, "epochs": 5, "opt": "adam", "opt_eps": 1e-8, "opt_betas": (0.9, 0.999),
          "clip_grad": 2.0, "momentum": 0.9, "weight_decay": 0.0, "reinit_optimizer": True, "unscale_lr": True,
          "train_mask": True, "task_inc": False, "nb_classes": TASKS * PER_TASK, "num_tasks": TASKS,
          "lora_rank": 5, "crct_epochs": 30, "ca_lr": 0.005, "not_train_ca": False,
          "ca_storage_efficient_method": "multi-centroid", "n_centroids": 10, "use_mlp_head": False,
          "model": "vit_base_patch16_224", "world_size": 1, "print_freq": 10 ** 6, "device": "cpu"}
# README imr_continual_lora: --epochs 50 (5 here) --lr 0.03 --slow_lr 0.1 --continual_type first_sl --lora_rank 5
CONTINUAL = {**COMMON, "lr": 0.03, "sched": "constant", "lora_type": "continual", "continual_type": "first_sl",
             "slow_lr": 0.1, "fix_epochs": 10, "trained_model": "", "mlp_ca_lr": 0.0005, "distributed": False}
# README imr_hidelora: --epochs 50 (5 here) --lr 0.01 --lora_rank 5 --reg 0.001 --sched cosine --lora_momentum 0.1;
# config --warmup-epochs 5 of 50 epochs, 1 of 5 here (configs/crosscheck/hidelora.yaml)
HIDELORA = {**COMMON, "lr": 0.01, "sched": "cosine", "warmup_lr": 1e-6, "min_lr": 1e-5, "warmup_epochs": 1,
            "cooldown_epochs": 10, "decay_epochs": 30, "decay_rate": 0.1, "lr_noise": None, "lr_noise_pct": 0.67,
            "lr_noise_std": 1.0, "patience_epochs": 10, "seed": 42, "lora_type": "hide", "size": 10, "reg": 0.001,
            "lora_momentum": 0.1, "trained_backbone_and_pet": False, "distributed": True}


class Images(Dataset):
    def __init__(self, x, y, transform):
        self.x, self.y, self.transform = x, y, transform

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.x[i])), int(self.y[i])


def loaders(npz: Path, seed: int, recipe):
    """(data_loader, data_loader_per_cls, class_mask, target_task_map) as its ``build_continual_dataloader``
    returns them, over the small task in norga's class order for ``seed``."""
    data, order = np.load(npz), list(range(TASKS * PER_TASK))
    random.Random(seed).shuffle(order)
    rank = np.argsort(order)
    x = {s: data[f"{s}_x"] for s in ("train", "test")}
    y = {s: rank[data[f"{s}_y"].astype(np.int64)] for s in ("train", "test")}
    train_t, plain_t = recipe(56, True), recipe(56, False)

    def part(split, classes, transform, shuffle):
        keep = np.isin(y[split], classes)
        return DataLoader(Images(x[split][keep], y[split][keep], transform), batch_size=BATCH, shuffle=shuffle)

    class_mask = [list(range(PER_TASK * t, PER_TASK * (t + 1))) for t in range(TASKS)]
    per_task = [{"train": part("train", c, train_t, True), "val": part("test", c, plain_t, False)} for c in class_mask]
    per_class = {c: {"train": part("train", [c], plain_t, False), "val": part("test", [c], plain_t, False)}
                 for c in range(TASKS * PER_TASK)}
    return per_task, per_class, class_mask, {c: c // PER_TASK for c in range(TASKS * PER_TASK)}


def recorded(engine, matrix: dict) -> None:
    """Wrap the engine's ``evaluate_till_now`` so each call's column of its ``acc_matrix`` is kept (the last call of a
    task is its final, post-alignment evaluation)."""
    original = engine.evaluate_till_now

    def evaluate_till_now(*args, **kwargs):
        out = original(*args, **kwargs)
        task = kwargs["task_id"]
        matrix[task] = [float(a) for a in kwargs["acc_matrix"][:task + 1, task]]
        return out

    engine.evaluate_till_now = evaluate_till_now


def seeded(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def build(vit_module, state: dict, **lora):
    model = reference_vit(vit_module.VisionTransformer, lora=True, lora_depth=5, **lora)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(("head", "lora_layer")) for k in missing), (missing, unexpected)
    return model


def run_continual(ref, state, data, seed: int, folder: Path) -> list:
    """Step 1: the task-identity model, checkpoints into ``folder/checkpoint``."""
    seeded(seed)
    args = SimpleNamespace(**CONTINUAL, seed=seed, output_dir=str(folder))
    model = build(ref["vit"], state, lora_type="continual", rank=args.lora_rank)
    for n, p in model.named_parameters():
        if n.startswith(FREEZE):
            p.requires_grad = False
    args.lr = args.lr * args.batch_size / 256.0  # continual_lora_trainer: unscale_lr
    optimizer = ref["create_optimizer"](args, model)  # first_sl: the trainer's one group on task 0
    matrix: dict = {}
    recorded(ref["continual"], matrix)
    ref["continual"].train_and_evaluate(model, model, torch.nn.CrossEntropyLoss(), data[0], data[1], optimizer, None,
                                        torch.device("cpu"), data[2], args, data[3])
    return [matrix[t] for t in range(TASKS)]


def run_hidelora(ref, state, data, seed: int, tii_folder: Path, folder: Path) -> list:
    """Step 2: HiDe-LoRA with the task-identity model of step 1."""
    seeded(seed)
    args = SimpleNamespace(**HIDELORA, output_dir=str(folder), trained_original_model=str(tii_folder))
    args.seed = seed
    original = build(ref["vit"], state, lora_type="continual", rank=args.lora_rank)
    model = build(ref["vit"], state, lora_type="hide", rank=args.lora_rank, lora_pool_size=args.size)
    for p in original.parameters():
        p.requires_grad = False
    for n, p in model.named_parameters():
        if n.startswith(FREEZE):
            p.requires_grad = False
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    args.lr = args.lr * args.batch_size / 256.0  # hidelora_trainer: unscale_lr
    optimizer = ref["create_optimizer"](args, model)
    scheduler, _ = ref["create_scheduler"](args, optimizer)
    matrix: dict = {}
    recorded(ref["hidelora"], matrix)
    ref["hidelora"].train_and_evaluate(ddp, model, original, torch.nn.CrossEntropyLoss(), data[0], data[1], optimizer,
                                       scheduler, torch.device("cpu"), data[2], data[3], args)
    return [matrix[t] for t in range(TASKS)]


def main(argv=None) -> int:
    args = reference_args(__doc__, "ivcylc/HiDe-PET", "crosscheck.hidelora.norga_side", argv, run_options)
    import utils
    import engines.continual_pet_engine as continual
    import engines.hide_lora_wtp_and_tap_engine as hidelora
    import torch.distributed as dist
    import vits.hide_lora_vision_transformer as vit
    from timm.optim import create_optimizer
    from timm.scheduler import create_scheduler

    from norga.data.transforms import cifar_recipe

    utils.MetricLogger.synchronize_between_processes = lambda self: None
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + args.seed % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    # its checkpoints hold its args (a SimpleNamespace here); its torch.load predates weights_only=True by default
    torch.serialization.add_safe_globals([SimpleNamespace])
    ref = {"vit": vit, "continual": continual, "hidelora": hidelora, "create_optimizer": create_optimizer,
           "create_scheduler": create_scheduler}
    state = torch.load(args.saved / "norga_hidelora.pt", weights_only=False)["forward"]["state_dict"]
    data = loaders(args.data, args.seed, cifar_recipe)
    with tempfile.TemporaryDirectory() as scratch:
        tii = run_continual(ref, state, data, args.seed, Path(scratch) / "tii")
        print(f"task-identity model, accuracy per task after the last task: {[round(a, 1) for a in tii[-1]]}")
        matrix = run_hidelora(ref, state, data, args.seed, Path(scratch) / "tii", Path(scratch) / "hidelora")
    dist.destroy_process_group()
    result = {"seed": args.seed, "matrix": matrix, "tii_model_matrix": tii, "FA": float(np.mean(matrix[-1]))}
    write_result(args.out, result)
    print(f"FA {result['FA']:.1f} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
