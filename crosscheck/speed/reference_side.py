"""The reference side of the speed report: one stage of the NoRGa authors' code on the small task, timed per stage.

    PYTHONPATH=/work/ref/timm-0.6.7:/work/ref/extras:REPO python -m crosscheck.speed.reference_side \
        --ref CHECKOUT --stage 1|2 --weights W.pt --data SMALL.npz --work DIR --seed 42 --threads 2 \
        --t0 SECONDS --timings FILE

CHECKOUT is Minhchuyentoancbn/MoE_PromptCL at e418337 (a git checkout, unchanged on disk). Its ``main.py`` runs as
the authors' script ``scripts/cifar100_DINO_NoRGa.sh`` does (stage 1: the task-identity head, stage 2: prompts and
classifier), with the small task's flags (crosscheck/speed/flags.py). Patched in memory for this CPU, nothing
else: ``torch.cuda.synchronize`` a no-op; their checkpoints' ``argparse.Namespace`` allowed to ``torch.load``
(torch >= 2.6 loads weights only by default); the one-permute fix of the prefix reshape in
``peft/prompt/norga_prompt.py``; ``create_model`` builds their VisionTransformer as DINOv2 ViT-S/14 at
``--input-size`` with layer scale and loads
the converted backbone ``--weights`` (only heads, prompts and the TII MLP are missing); a ``Split-CIFAR50xc`` dataset
reads the small task from the .npz; the CIFAR train crop takes ``--input-size`` instead of 224. Their stage functions
are wrapped with timers (crosscheck/speed/stage_timer.py); one JSON line (seconds per stage, wall, and after stage 2
the accuracy matrix after the last evaluation of each task) is appended to ``--timings``.
This file imports the reference checkout; it copies none of it.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from functools import partial
from pathlib import Path

T_IMPORT = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from crosscheck.speed.flags import reference_flags  # noqa: E402
from crosscheck.speed.stage_timer import StageTimer, write  # noqa: E402

MISSING_OK = ("head", "e_prompt", "mlp.", "fc_norm")  # what the converted backbone cannot hold


def load_patched_prompt_module(ref: Path) -> None:
    """Import ``peft.prompt.norga_prompt`` from the checkout with the prefix reshape permuted (layers, 2, B, ...)
    -> (layers, B, 2, ...) first: the reference's source with that one change, compiled in memory."""
    path = ref / "peft" / "prompt" / "norga_prompt.py"
    source = path.read_text()
    line = "batched_prompt = batched_prompt_raw.reshape(\n                        num_layers, batch_size, dual,"
    if source.count(line) != 3:
        raise SystemExit(f"{path}: the prefix reshape moved ({source.count(line)} of 3 found); update this patch")
    source = source.replace(line, line.replace(".reshape(", ".permute(0, 2, 1, 3, 4, 5, 6).reshape("))
    spec = importlib.util.spec_from_loader("peft.prompt.norga_prompt", loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the one-line patch, in memory
    sys.modules["peft.prompt.norga_prompt"] = module


def small_vit_factory(vit_module, weights: dict, image_size: int):
    """A ``create_model`` replacement: their VisionTransformer as DINOv2 ViT-S/14 (layer scale, LayerNorm eps 1e-6) at
    ``image_size``, with the converted backbone loaded; the variant name and ``pretrained`` are ignored."""
    def create_model(_name, pretrained=False, drop_block_rate=None, **kwargs):
        model = vit_module.VisionTransformer(img_size=image_size, patch_size=14, embed_dim=384, depth=12, num_heads=6,
                                             mlp_ratio=4.0, qkv_bias=True, init_values=1e-5,
                                             norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
        missing, unexpected = model.load_state_dict(weights, strict=False)
        missing = [k for k in missing if not k.startswith(MISSING_OK)]
        if missing or unexpected:
            raise SystemExit(f"converted backbone does not fit: missing {missing}, unexpected {unexpected}")
        return model
    return create_model


class SmallCifar(torch.utils.data.Dataset):
    """One split of the small task's .npz as torchvision's CIFAR datasets present it (``data``, ``targets``,
    ``classes``; items are (transform(PIL image), label))."""

    def __init__(self, npz: Path, split: str, transform):
        from PIL import Image
        data = np.load(npz)
        self.data, self.targets = data[f"{split}_x"], [int(y) for y in data[f"{split}_y"]]
        self.classes = [str(c) for c in range(int(max(self.targets)) + 1)]
        self.transform, self.target_transform, self._image = transform, None, Image.fromarray

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i):
        return self.transform(self._image(self.data[i])), self.targets[i]


def patch_datasets(datasets_module, npz: Path) -> None:
    """``Split-CIFAR50xc`` = the small task; the CIFAR train crop at ``--input-size`` (their code: 224)."""
    original_get, original_cifar = datasets_module.get_dataset, datasets_module.build_cifar_transform
    from torchvision import transforms

    def get_dataset(name, transform_train, transform_val, args, target_transform=None):
        if name != "CIFAR50xc":
            return original_get(name, transform_train, transform_val, args, target_transform)
        return SmallCifar(npz, "train", transform_train), SmallCifar(npz, "test", transform_val)

    def build_cifar_transform(is_train, args):
        out = original_cifar(is_train, args)
        if is_train:
            crop = out.transforms[0]
            out.transforms[0] = transforms.RandomResizedCrop(args.input_size, interpolation=crop.interpolation)
        return out

    datasets_module.get_dataset, datasets_module.build_cifar_transform = get_dataset, build_cifar_transform


def time_stages(timer: StageTimer, stage: int, captured: dict) -> None:
    """Wrap the stage functions of the engine of ``stage`` with ``timer``; stage 2 also keeps the accuracy matrix
    (percent, (T, T)) that each evaluation after the alignment fills."""
    if stage == 1:
        import engines.norga_tii_engine as engine
        names = {"train_one_epoch": "tii", "train_task_adaptive_prediction": "tii", "_compute_mean": "statistics",
                 "evaluate_till_now": "evaluation"}
    else:
        import engines.norga_prompt_engine as engine
        names = {"train_one_epoch": "wtp", "train_task_adaptive_prediction": "tap", "_compute_mean": "statistics",
                 "evaluate_till_now": "evaluation"}
    for name, label in names.items():
        timer.patch(engine, name, label)
    if stage == 2:
        evaluate = engine.evaluate_till_now

        def keep_matrix(*args, **kwargs):
            out = evaluate(*args, **kwargs)
            captured["acc_matrix"] = np.array(kwargs["acc_matrix"], dtype=float).tolist()
            captured["evaluations"] = captured.get("evaluations", 0) + 1
            return out
        engine.evaluate_till_now = keep_matrix


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", type=Path, required=True, help="checkout of Minhchuyentoancbn/MoE_PromptCL (e418337)")
    p.add_argument("--stage", type=int, choices=(1, 2), required=True)
    p.add_argument("--weights", type=Path, required=True, help="converted backbone state dict (.pt)")
    p.add_argument("--data", type=Path, required=True, help="the small task's .npz")
    p.add_argument("--work", type=Path, required=True, help="folder of their checkpoints (stage1/, stage2/)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--image-size", type=int, default=56)
    p.add_argument("--t0", type=float, default=None, help="time.time() when the parent started this process")
    p.add_argument("--timings", type=Path, required=True)
    args = p.parse_args(argv)
    timer = StageTimer(args.t0 if args.t0 is not None else T_IMPORT)
    torch.set_num_threads(args.threads)
    torch.cuda.synchronize = lambda *a, **k: None  # their loops call it after every step
    torch.serialization.add_safe_globals([argparse.Namespace])  # their checkpoints hold their args (torch >= 2.6)
    sys.path.insert(0, str(args.ref))
    load_patched_prompt_module(args.ref)
    import datasets as datasets_module
    import main as their_main
    import trainers.norgaprompt_tii_trainer as tii_trainer
    import trainers.norgaprompt_trainer as prompt_trainer
    import vits.norga_prompt_vision_transformer as vit_module
    weights = torch.load(args.weights, map_location="cpu")
    tii_trainer.create_model = prompt_trainer.create_model = small_vit_factory(vit_module, weights, args.image_size)
    patch_datasets(datasets_module, args.data)
    captured: dict = {}
    time_stages(timer, args.stage, captured)
    sys.argv = ["main.py", *reference_flags(args.stage, args.data, args.work, args.seed, args.image_size)]
    their_main.main(their_main.get_args())
    write(args.timings, timer.record(side="reference", stage=args.stage, seed=args.seed, threads=args.threads,
                                     **captured))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
