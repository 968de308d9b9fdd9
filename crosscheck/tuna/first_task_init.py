"""The first task's initial tensors of a TUNA run, exchanged between norga and the reference (the TUNA swap of
docs/crosscheck.md). Both sides call :func:`exchange_first_task_init` right after their own first-task draws (the
adapter of every block and the head), so swapping the tensors changes nothing else of either run's random stream.

The file (``torch.save``): ``{"adapter": [{"down.weight" (r, D), "down.bias" (r,), "up.weight" (D, r), "up.bias"
(D,)} per block], "head": (classes of task 0, D)}``. Imports only torch: the reference environment imports it too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

TENSORS = ("weight", "bias")


def adapter_tensors(names: Dict[str, str], adapters: Sequence[nn.Module]) -> List[Dict[str, torch.Tensor]]:
    """Copies of every block's adapter tensors in norga's naming (``names``: norga's ``down``/``up`` -> the module's
    layer names): ``[{"down.weight", "down.bias", "up.weight", "up.bias"} per block]``."""
    return [{f"{ours}.{t}": getattr(getattr(a, theirs), t).detach().clone() for ours, theirs in names.items()
             for t in TENSORS} for a in adapters]


def exchange_first_task_init(names: Dict[str, str], adapters: Sequence[nn.Module], head: torch.Tensor,
                             init_in: Optional[Path], init_out: Optional[Path]) -> None:
    """Write ``adapters`` (one per block; ``names`` maps norga's ``down``/``up`` to the module's layer names) and
    ``head`` to ``init_out``; then, with ``init_in``, copy that file's tensors over them (shapes must match)."""
    if init_out is not None:
        init_out.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"adapter": adapter_tensors(names, adapters), "head": head.detach().clone()}, init_out)
        print(f"wrote the first task's initial tensors to {init_out}", flush=True)
    if init_in is None:
        return
    saved = torch.load(init_in, weights_only=True)
    if len(saved["adapter"]) != len(adapters) or saved["head"].shape != head.shape:
        raise SystemExit(f"{init_in}: {len(saved['adapter'])} adapters and head {tuple(saved['head'].shape)}, this run "
                         f"has {len(adapters)} and {tuple(head.shape)}")
    with torch.no_grad():
        for a, state in zip(adapters, saved["adapter"]):
            for ours, theirs in names.items():
                for t in TENSORS:
                    getattr(getattr(a, theirs), t).copy_(state[f"{ours}.{t}"])
        head.copy_(saved["head"])
    print(f"started the first task from {init_in}", flush=True)
