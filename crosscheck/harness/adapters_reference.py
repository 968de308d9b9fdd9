"""What the reference sides of the RanPAC, APER and EASE cross-checks share. Run as part of a reference-side
script (``crosscheck/*/reference_side.py``) in the reference environment (timm 0.6.13 first on the path).

The three official codes (RanPAC/RanPAC, zhoudw-zdw/RevisitingCIL, sun-hailong/CVPR24-Ease) carry the same
AdaptFormer ViT: separate ``q_proj``/``k_proj``/``v_proj``, ``fc1``/``fc2`` directly on the block, no layer
scale, a parallel ``Adapter`` (``down_proj``, ``up_proj``) on the post-attention state. It is built here as DINOv2
ViT-S/14 at 56 px and given norga's converted backbone: qkv split in three, DINOv2's layer-scale vectors folded
into ``attn.proj`` and ``fc2`` (exact: the adapter's output is added after the scaled MLP branch, unscaled, in
both), loaded with only adapter keys missing. Its AdaptFormer options are the ones their builders hard-code
(parallel, no adapter norm, "lora" init, scale 0.1, dropout 0.1) with ``d_model`` 384 instead of 768 (ViT-B's
width, hard-coded too). Nothing is written to a checkout; CPU changes are made in memory (:func:`cpu_only`).
"""
from __future__ import annotations

import re
from functools import partial
from typing import Callable, Dict, Iterable

import torch
from torch import nn

from crosscheck.harness.reference_cli import biggest, fold_layer_scale, reference_args

DIM, HEADS = 384, 6
ADAPTER_NAMES = {"down": "down_proj", "up": "up_proj"}


def cpu_only() -> None:
    """Make the references' CUDA requests CPU no-ops, in memory: ``Tensor.cuda()`` and ``Module.cuda()`` return
    their object, ``Tensor.to(device='cuda')`` / ``.to('cuda')`` go to the CPU."""
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return original_to(self, *("cpu" if a == "cuda" else a for a in args), **kwargs)

    torch.Tensor.to = to
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self


def adapter_state(timm_state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """norga's timm DINOv2 state dict -> the names of the references' adapter ViT (layer scale folded)."""
    out = {}
    for key, value in fold_layer_scale(timm_state).items():
        if key.endswith(("attn.qkv.weight", "attn.qkv.bias")):
            for name, part in zip("qkv", value.chunk(3, dim=0)):
                out[key.replace("attn.qkv", f"attn.{name}_proj")] = part.clone()
        else:
            out[key.replace(".mlp.fc", ".fc")] = value
    return out


def tuning_config(easydict, **extra):
    """The AdaptFormer options their ``get_convnet`` / ``get_backbone`` build, at ViT-S width."""
    return easydict(ffn_adapt=True, ffn_option="parallel", ffn_adapter_layernorm_option="none",
                    ffn_adapter_init_option="lora", ffn_adapter_scalar="0.1", ffn_num=64, d_model=DIM,
                    vpt_on=False, vpt_num=0, **extra)


def adapter_vit(vit_class, config, timm_state: Dict[str, torch.Tensor], adapter_key: str) -> nn.Module:
    """The reference's adapter VisionTransformer as ViT-S/14 at 56 px with norga's backbone; as their builders
    do, the keys the checkpoint lacks (the adapters) are trainable and everything else frozen."""
    model = vit_class(img_size=56, patch_size=14, embed_dim=DIM, depth=12, num_heads=HEADS, mlp_ratio=4,
                      qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), num_classes=0, global_pool=False,
                      drop_path_rate=0.0, tuning_config=config)
    missing, unexpected = model.load_state_dict(adapter_state(timm_state), strict=False)
    assert not unexpected and all(adapter_key in k for k in missing), (missing, unexpected)
    for name, p in model.named_parameters():
        p.requires_grad = name in missing
    model.out_dim = DIM
    return model.eval()


def frozen_timm_vit(timm_module, timm_state: Dict[str, torch.Tensor]) -> nn.Module:
    """timm's own VisionTransformer (the reference environment's timm) as DINOv2 ViT-S/14 at 56 px with layer
    scale: what their ``get_convnet`` returns for the plain pretrained ViT, ``num_classes=0``."""
    model = timm_module.models.vision_transformer.VisionTransformer(
        img_size=56, patch_size=14, embed_dim=DIM, depth=12, num_heads=HEADS, init_values=1e-5, num_classes=0)
    model.load_state_dict(timm_state, strict=True)
    model.out_dim = DIM
    return model.eval()


@torch.no_grad()
def load_adapters(blocks: Iterable[nn.Module], norga_tuned: Dict[str, torch.Tensor], subspace: int = 0) -> None:
    """Copy norga's adapter ``subspace`` (keys ``<block>.<subspace>.<down|up>.<weight|bias>``) into the
    reference's adapters, one per block in block order."""
    blocks = list(blocks)
    for key, value in norga_tuned.items():
        block, k, layer, kind = re.fullmatch(r"(\d+)\.(\d+)\.(down|up)\.(weight|bias)", key).groups()
        if int(k) == subspace:
            getattr(getattr(blocks[int(block)], ADAPTER_NAMES[layer]), kind).copy_(value)


def adapter_difference(blocks: Iterable[nn.Module], norga_tuned: Dict[str, torch.Tensor], subspace: int = 0) -> float:
    """max |reference - norga| over adapter ``subspace``'s tensors."""
    blocks, worst = list(blocks), 0.0
    for key, value in norga_tuned.items():
        block, k, layer, kind = re.fullmatch(r"(\d+)\.(\d+)\.(down|up)\.(weight|bias)", key).groups()
        if int(k) == subspace:
            ours = getattr(getattr(blocks[int(block)], ADAPTER_NAMES[layer]), kind).detach()
            worst = max(worst, float((ours - value).abs().max()))
    return worst


def moved(initial: Dict[str, torch.Tensor], trained: Dict[str, torch.Tensor], subspace: int = 0) -> float:
    """How far norga's adapter ``subspace`` moved in training (max |trained - initial|)."""
    return max(float((trained[k] - initial[k]).abs().max()) for k in trained if k.split(".")[1] == str(subspace))


def steps_loaders(x: torch.Tensor, y: torch.Tensor, size: int = 20):
    """The three fixed batches as the references' loaders yield them: (index, images, labels)."""
    return [(torch.arange(i, min(i + size, len(y))), x[i:i + size], y[i:i + size]) for i in range(0, len(y), size)]


def set_dropout(blocks: Iterable[nn.Module], p: float) -> None:
    for adapter in blocks:
        adapter.dropout = p


@torch.no_grad()
def load_head(head: nn.Module, initial: Dict[str, torch.Tensor]) -> None:
    """A reference cosine head (``weight`` (C, D), ``sigma`` (1,)) set to norga's initial head."""
    head.weight.copy_(initial["weight"])
    head.sigma.copy_(initial["sigma"])


def start_steps(adapters, initial: Dict[str, torch.Tensor], dropout: float, subspace: int = 0) -> None:
    """Before the training steps: norga's initial adapter ``subspace`` in ``adapters``, their dropout ``dropout``."""
    load_adapters(adapters, initial, subspace)
    set_dropout(adapters, dropout)


def report_steps(prefix: str, adapters, norga: dict, head: Dict[str, torch.Tensor], subspace: int = 0,
                 adapters_label: str = "adapters") -> None:
    """Print the trained adapter ``subspace`` and the head (``head``: its weight and sigma after training) against
    norga's (``norga``: initial / trained adapters, initial_head / trained_head), each max |ref - norga| with how
    far norga's moved; one line each, starting with ``prefix``."""
    gap = adapter_difference(adapters, norga["trained"], subspace)
    print(f"{prefix}, {adapters_label}: max |ref - norga| {gap:.1e} "
          f"(moved {moved(norga['initial'], norga['trained'], subspace):.1e})")
    for name in ("weight", "sigma"):
        moved_by = biggest(norga["trained_head"][name], norga["initial_head"][name])
        print(f"{prefix}, head {name}: max |ref - norga| {biggest(head[name], norga['trained_head'][name]):.1e} "
              f"(moved {moved_by:.1e})")


def run_reference_side(doc: str, repository: str, writer: str, saved_name: str, namespace: Callable[[], object],
                       checks: Callable[[object, dict], None], argv=None) -> int:
    """The whole ``main`` of an adapter reference side: ``--ref`` / ``--saved`` parsed (``reference_args``), CUDA
    made a CPU no-op (:func:`cpu_only`), the reference's classes imported (``namespace()``), then
    ``checks(ref, saved)`` on what the norga side wrote as ``saved_name``. Returns the exit code 0."""
    args = reference_args(doc, repository, writer, argv)
    cpu_only()
    ref = namespace()
    checks(ref, torch.load(args.saved / saved_name, weights_only=False))
    return 0
