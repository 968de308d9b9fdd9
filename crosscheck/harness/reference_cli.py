"""The command line and the helpers every reference side of a cross-check shares. A reference side runs in the
reference code's own environment (``python -m crosscheck.<method>.reference_side --ref CHECKOUT --saved DIR`` from
the repository root): ``reference_args`` parses ``--ref`` / ``--saved``, makes the checkout importable and
``torch.cuda.synchronize`` a no-op; ``biggest`` is the max |reference − norga| every check prints; the rest builds the
reference ViTs as DINOv2 ViT-S/14 at 56 px and patches them in memory. Imports only torch and the standard library
(no norga, no bench): the reference environments have neither.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch
from torch import nn


def reference_args(doc: str, repository: str, writer: str, argv=None, extra=None) -> argparse.Namespace:
    """Parse a reference-side script's ``--ref CHECKOUT --saved PATH`` (and what ``extra(parser)`` adds); then one
    torch thread, the checkout importable (the reference codes import their modules by top-level names) and
    ``torch.cuda.synchronize`` a no-op (the authors' code calls it after every step)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", type=Path, required=True, help=f"checkout of {repository}")
    p.add_argument("--saved", type=Path, required=True, help=f"what {writer} wrote")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.cuda.synchronize = lambda *a, **k: None
    sys.path.insert(0, str(args.ref))
    return args


def run_options(p: argparse.ArgumentParser) -> None:
    """The options of a reference script that runs a whole seed: ``--data`` (the small task's .npz), ``--seed``,
    ``--out`` (the result file)."""
    p.add_argument("--data", type=Path, required=True, help="the small task (crosscheck.harness.small_task)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)


def write_result(out: Path, result: dict) -> None:
    """A whole reference run's result (``--out``): JSON, one level indented, its folder made if needed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


def without_workers(module) -> None:
    """CPU patch in memory: a PILOT-family learner module's DataLoaders run in the main process (its module-level
    ``num_workers``, e.g. 8, and every ``DataLoader(..., num_workers=k)`` it builds, e.g. ``_compute_mean``'s 4)."""
    from torch.utils.data import DataLoader

    module.num_workers = 0
    module.DataLoader = lambda *a, **k: DataLoader(*a, **{**k, "num_workers": 0})


def reference_vit(vit_class, **prompting):
    """The reference VisionTransformer as DINOv2 ViT-S/14 at 56 px (layer scale, LayerNorm eps 1e-6), 50 classes."""
    return vit_class(img_size=56, patch_size=14, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0, qkv_bias=True,
                     init_values=1e-5, norm_layer=partial(nn.LayerNorm, eps=1e-6), num_classes=50, **prompting).eval()


def load_backbone(model, state_dict) -> None:
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = [k for k in missing if not k.startswith(("head", "e_prompt", "g_prompt"))]
    assert not missing and not unexpected, (missing, unexpected)


def biggest(a, b) -> float:
    return float((a - b).abs().max())


def patch_prefix_reshape(model, prompt_module) -> None:
    """Give ``model.e_prompt`` a forward whose gathered prefixes (layers, 2, B, ...) are permuted to (layers, B, 2,
    ...) before the reshape: the reference's source with that one change, compiled in memory."""
    source = Path(prompt_module.__file__).read_text()
    line = "batched_prompt = batched_prompt_raw.reshape(\n                        num_layers, batch_size, dual,"
    assert source.count(line) == 2, "the reference's prefix reshape moved: update this check"
    patched = source.replace(line, line.replace(".reshape(", ".permute(0, 2, 1, 3, 4, 5, 6).reshape("))
    namespace: dict = {}
    exec(compile(patched, prompt_module.__file__, "exec"), namespace)  # noqa: S102 - the one-line patch, in memory
    model.e_prompt.forward = namespace["EPrompt"].forward.__get__(model.e_prompt)


def fold_layer_scale(state: dict) -> dict:
    """A timm DINOv2 state dict with ``blocks.i.ls{1,2}.gamma`` folded into ``attn.proj`` / ``mlp.fc2``."""
    out = {k: v.clone() for k, v in state.items() if ".ls1." not in k and ".ls2." not in k}
    for key, gamma in state.items():
        if key.endswith(("ls1.gamma", "ls2.gamma")):
            block, layer = key.split(".ls")[0], ("attn.proj" if ".ls1." in key else "mlp.fc2")
            out[f"{block}.{layer}.weight"] = gamma[:, None] * state[f"{block}.{layer}.weight"]
            out[f"{block}.{layer}.bias"] = gamma * state[f"{block}.{layer}.bias"]
    return out
