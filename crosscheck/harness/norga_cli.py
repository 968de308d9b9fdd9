"""The command line every norga side of a cross-check shares (``python -m crosscheck.<method>.norga_side
--shared ../shared --out DIR``): parse ``--shared`` / ``--out``, seed the global generator, build the tensors to
save, write them as one ``torch.save`` file DIR/NAME (a dict of tensors, dicts and lists) and print
``wrote DIR/NAME``. The reference side reads that file with ``--saved DIR`` (``reference_cli.reference_args``).

Imports only torch and the standard library.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Optional

import torch

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = Path("weights") / "dinov2_vits14_imgfocus.safetensors"  # below --shared: the DINOv2 ViT-S/14
BACKBONE_OVERRIDES = "backbone_overrides.txt"  # beside WEIGHTS in a stand-in (crosscheck.harness.ci_task) only


def norga_args(doc: str, argv=None, extra: Optional[Callable[[argparse.ArgumentParser], None]] = None
               ) -> argparse.Namespace:
    """Parse a norga-side script's ``--shared DIR --out DIR`` (and what ``extra(parser)`` adds)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="folder with data/ and weights/")
    p.add_argument("--out", type=Path, required=True)
    if extra is not None:
        extra(p)
    return p.parse_args(argv)


def weights_in(shared: Path) -> Path:
    """The DINOv2 ViT-S/14 safetensors file below ``shared``."""
    return shared / WEIGHTS


def write(out: Path, name: str, saved) -> None:
    """``torch.save`` ``saved`` as ``out/name`` (folder created) and say so."""
    out.mkdir(parents=True, exist_ok=True)
    torch.save(saved, out / name)
    print(f"wrote {out / name}")


def run_norga_side(doc: str, name: str, build: Callable[[Path], dict], argv=None, seed: Optional[int] = 0,
                   one_thread: bool = False) -> int:
    """The whole ``main`` of a norga side: parse, ``torch.manual_seed(seed)`` (none when ``seed`` is None), one
    torch thread if ``one_thread``, then ``build(shared)`` written as DIR/``name``. Returns the exit code 0."""
    args = norga_args(doc, argv)
    if seed is not None:
        torch.manual_seed(seed)
    if one_thread:
        torch.set_num_threads(1)
    write(args.out, name, build(args.shared))
    return 0
