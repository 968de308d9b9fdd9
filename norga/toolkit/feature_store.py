"""The frozen-feature store (``norga train --feature-cache DIR``): frozen features of un-augmented images, computed
once and reused across the tasks of a run and across the runs and seeds of a sweep.

A *feature space* is everything that fixes a frozen feature besides the image: the checksum of the backbone's
weights, the frozen forward (which wrappers sit on which blocks), the image transform (its ``repr``: image size,
resize, crop, normalisation), the device type, autocast dtype, compile mode and the torch / timm versions. Each
space is a folder ``DIR/<space checksum>/`` holding ``space.json`` (those fields, readable) and parts
``part-<checksum>.safetensors``: ``keys`` (N, 16) uint8, the images' content keys (:func:`sample_keys`: a hash
of the pixels, or of path, size and mtime for image files), and ``features`` (N, D) float32, with the
SHA-256 of both in the metadata and the name. A part is written once, atomically (temp file + rename), and
verified when read: a part whose bytes do not match its checksum is logged, deleted and its rows computed again.

Rows are looked up by content, so a seed with another class order or per-class subsample reuses every image it
shares with an earlier run. A ViT's frozen forward is per sample (a row does not depend on the rest of its
batch; ``tests/test_feature_store.py`` checks it on this platform), so stored rows equal fresh ones bit for bit.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset
from tqdm.auto import tqdm

from ..errors import NorgaError
from ..outputs import Zone, write_output
from .stages import extract_features

from .store_folder import FORMAT, OPTION, claim_store
KEY_BYTES = 16


def tensor_checksum(tensors: Dict[str, Tensor]) -> str:
    """SHA-256 (hex) over the names, dtypes, shapes and bytes of ``tensors`` (in name order)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy())  # the buffer itself, no copy
    return digest.hexdigest()


def forward_fingerprint(model: nn.Module) -> List[str]:
    """What fixes the frozen forward of ``model`` besides its weights: every submodule's name and class.

    A module class may list in ``outside_frozen_forward`` the children its forward skips in a frozen pass, and
    say with ``frozen_forward_note()`` which of them it applies now (:class:`~norga.models.lora_qkv.LoRAQKV`: its
    LoRA branches, none in a frozen pass). The children are left out and the note is kept, so a method that adds a
    branch per task keeps one feature space, and a pass that applies branches gets a space of its own."""
    skipped = [f"{name}.{child}" if name else child for name, module in model.named_modules()
               for child in getattr(type(module), "outside_frozen_forward", ())]
    return [_module_entry(name, module) for name, module in model.named_modules()
            if not any(name == s or name.startswith(s + ".") for s in skipped)]


def _module_entry(name: str, module: nn.Module) -> str:
    entry = f"{name}:{type(module).__module__}.{type(module).__qualname__}"
    note = getattr(module, "frozen_forward_note", None)
    return f"{entry} ({note()})" if note is not None else entry


def sample_keys(dataset) -> np.ndarray:
    """Content keys (N, 16) uint8 of a dataset's images (``dataset.images``: arrays, or image file paths)."""
    images = getattr(dataset, "images", None)
    if images is None:
        raise NorgaError(f"--feature-cache: {type(dataset).__name__} has no images to key; run without "
                         "--feature-cache")
    keys = np.empty((len(images), KEY_BYTES), dtype=np.uint8)
    for i, item in enumerate(images):
        digest = hashlib.blake2b(digest_size=KEY_BYTES)
        if isinstance(item, str):
            try:
                stat = os.stat(item)
            except OSError as err:
                raise NorgaError(f"cannot read image {item} ({err.strerror or err}); restore or delete the file "
                                 "('norga train --dry-run' lists every unreadable file)") from err
            digest.update(f"file|{os.path.abspath(item)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        else:
            item = np.ascontiguousarray(item)
            digest.update(f"array|{item.dtype}|{item.shape}|".encode())
            digest.update(item.tobytes())
        keys[i] = np.frombuffer(digest.digest(), dtype=np.uint8)
    return keys


def start_like_extraction(loader: DataLoader) -> None:
    """Open ``loader`` as :func:`~norga.toolkit.stages.extract_features` does and take its first batch (no
    forward): its iterators draw their base seeds from the global generator (``tqdm.auto`` opens two), so reading
    stored features leaves the global random state exactly as computing them does."""
    for _ in tqdm(loader, disable=True):
        break


class FeatureStore:
    """Frozen features under ``root`` for one backbone (``backbone``: its weights' checksum) and run context
    (``context``: device type, amp, compile, versions); ``batch_size`` and ``loader_options`` for missing rows.
    ``read`` / ``computed`` count the rows served from parts and computed by this process."""

    def __init__(self, root: Path, backbone: str, context: Dict[str, str], batch_size: int,
                 loader_options: Optional[dict] = None, log=None):
        self.root, self.backbone, self.context = Path(root), backbone, dict(context)
        self.batch_size, self.loader_options, self.log = batch_size, dict(loader_options or {}), log
        self.read = self.computed = 0
        self._parts: Dict[Path, Tuple[Dict[bytes, int], Tensor]] = {}  # verified parts: (row of each key, features)

    def loader_features(self, model: nn.Module, loader: DataLoader, device, desc: str) -> Tuple[Tensor, Tensor]:
        """What ``extract_features(model, loader, device)`` returns for an un-augmented loader without prompts,
        (N, D) features and (N,) labels, reading stored rows and computing only the missing ones."""
        start_like_extraction(loader)
        return self.dataset_features(model, loader.dataset, device, desc)

    @torch.no_grad()
    def dataset_features(self, model: nn.Module, dataset, device, desc: str) -> Tuple[Tensor, Tensor]:
        """Frozen features (N, D) float32 on the CPU and labels (N,) of every image of ``dataset``, in order."""
        model.eval()
        space = self.space_folder(model, dataset)
        keys = sample_keys(dataset)
        feats = torch.empty(len(keys), model.embed_dim)
        missing = self._fill(space, keys, feats)
        if missing:
            fresh = self._compute(model, Subset(dataset, missing), device, desc)
            self._save_part(space, keys[missing], fresh)
            feats[missing] = fresh
        self.read += len(keys) - len(missing)
        self.computed += len(missing)
        return feats, torch.as_tensor(np.asarray(dataset.labels), dtype=torch.long)

    def summary(self) -> str:
        return f"feature store {self.root}: {self.read} frozen feature rows read, {self.computed} computed"

    # ---- spaces and parts ----------------------------------------------------------------------
    def space_fields(self, model: nn.Module, dataset) -> dict:
        return {"format": FORMAT, "backbone_sha256": self.backbone, **self.context,
                "transform": repr(getattr(dataset, "transform", None)), "forward": forward_fingerprint(model)}

    def space_folder(self, model: nn.Module, dataset) -> Path:
        """The folder of the feature space of ``model`` on ``dataset``'s transform (``space.json`` written once)."""
        fields = self.space_fields(model, dataset)
        text = json.dumps(fields, indent=1, sort_keys=True) + "\n"
        folder = self.root / hashlib.sha256(text.encode()).hexdigest()[:32]
        if not (folder / "space.json").is_file():
            write_output(folder / "space.json", text.encode(), OPTION, Zone(self.root))
        return folder

    def _fill(self, space: Path, keys: np.ndarray, feats: Tensor) -> List[int]:
        """Copy the stored row of every key (N, 16) into ``feats`` (N, D); the positions no intact part holds."""
        missing = list(range(len(keys)))
        for path in sorted(space.glob("part-*.safetensors")):
            part = self._part(path) if missing else None
            if part is None:
                continue
            row_of, stored = part
            names = [keys[i].tobytes() for i in missing]
            hits = [(i, row_of[name]) for i, name in zip(missing, names) if name in row_of]
            if hits:
                positions, rows = zip(*hits)
                feats[list(positions)] = stored[list(rows)]
                missing = [i for i, name in zip(missing, names) if name not in row_of]
        return missing

    def _part(self, path: Path) -> Optional[Tuple[Dict[bytes, int], Tensor]]:
        """A part's (keys, features) once verified; a corrupt part is logged, deleted and read as absent."""
        if path not in self._parts:
            from safetensors import SafetensorError
            from safetensors.torch import load

            try:
                data = path.read_bytes()
                tensors = load(data)
                checksum = tensor_checksum(tensors)
                intact = path.name == f"part-{checksum[:32]}.safetensors"
            except (OSError, SafetensorError, ValueError, KeyError):
                intact = False
            if not intact:
                self._warn(f"feature store: {path} is corrupt (checksum mismatch or unreadable); deleted, its rows "
                           "are computed again")
                path.unlink(missing_ok=True)
                return None
            self._keep(path, tensors)
        return self._parts[path]

    def _keep(self, path: Path, tensors: Dict[str, Tensor]) -> None:
        self._parts[path] = ({k.tobytes(): row for row, k in enumerate(tensors["keys"].numpy())}, tensors["features"])

    def _save_part(self, space: Path, keys: np.ndarray, features: Tensor) -> None:
        from safetensors.torch import save

        _, first = np.unique(keys, axis=0, return_index=True)  # identical images: one row
        first.sort()
        tensors = {"keys": torch.from_numpy(keys[first].copy()), "features": features[first].contiguous()}
        checksum = tensor_checksum(tensors)
        path = space / f"part-{checksum[:32]}.safetensors"
        write_output(path, save(tensors, metadata={"format": FORMAT, "sha256": checksum}), OPTION, Zone(self.root))
        self._keep(path, tensors)

    def _compute(self, model: nn.Module, subset: Subset, device, desc: str) -> Tensor:
        """Features (M, D) of ``subset`` (its own loader and generator: the global random state is untouched)."""
        options = {**self.loader_options, "persistent_workers": False}  # a throw-away loader: its workers end with it
        loader = DataLoader(subset, batch_size=self.batch_size, generator=torch.Generator(), **options)
        feats, _ = extract_features(model, loader, device, desc=desc)
        return feats

    def _warn(self, line: str) -> None:
        if self.log is not None:
            self.log.warning(line)
        else:
            print(f"warning: {line}", file=sys.stderr)


def open_store(root: Path, vit: nn.Module, cfg, log=None) -> FeatureStore:
    """The store under ``root`` for the run of ``cfg`` on backbone ``vit`` (before a method wraps it)."""
    import timm

    from .devices import loader_options, resolve_device

    root = claim_store(Path(root))
    context = {"device_type": resolve_device(cfg.device).type, "amp": str(cfg.amp), "compile": str(cfg.compile),
               "torch": torch.__version__, "timm": timm.__version__}
    return FeatureStore(root, tensor_checksum(vit.state_dict()), context, cfg.eval_batch_size,
                        loader_options(cfg), log)
