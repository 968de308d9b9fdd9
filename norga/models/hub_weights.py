"""Backbone files from the Hugging Face Hub, through huggingface_hub's cache (``HF_HOME`` / ``HF_HUB_CACHE``).

Two spellings reach the Hub:

- ``model.checkpoint: hf-hub:ORG/NAME[/FILE][@REVISION]``: a weights file of a Hub repo (default: the first of
  :data:`WEIGHT_FILES` the repo has), loaded strictly into the ``model.preset`` / ``model.name`` architecture
  exactly like a local checkpoint file;
- ``model.name: hf_hub:ORG/NAME`` (or ``hf-hub:``), timm's own: the architecture from the repo's
  ``config.json`` and, with ``model.pretrained: true``, its weights.

A file in the local cache is used without network. Otherwise it is downloaded, unless ``HF_HUB_OFFLINE`` is
set or the Hub's host does not resolve: then one :class:`WeightsUnavailable` names the cache folder, the repo
and the fixes. :func:`weights_file` is the file a run's weights came from (its checksum goes to metrics.json).
"""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Optional, Sequence, Tuple
from urllib.parse import urlparse

from ..config import ConfigError
from ..config.schema import is_hub_reference  # noqa: F401 - re-exported: the torch-free test of a Hub value
from .checkpoints import CheckpointError, first_line

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # timm's names on the Hub, safetensors first


class WeightsUnavailable(CheckpointError):
    """Hub weights are neither in the local cache nor downloadable now."""


def split_reference(ref: str, key: str) -> Tuple[str, Optional[str], Optional[str]]:
    """``hf-hub:ORG/NAME[/FILE][@REVISION]`` -> (repo id ``ORG/NAME``, FILE or None, REVISION or None)."""
    body, _, revision = ref.split(":", 1)[1].partition("@")
    parts = body.strip("/").split("/")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"{key}: {ref!r} is not a Hub repo; write hf-hub:ORG/NAME (optionally /FILE and "
                          "@REVISION), e.g. hf-hub:timm/vit_base_patch16_224.augreg_in21k")
    return "/".join(parts[:2]), "/".join(parts[2:]) or None, revision or None


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def cached_file(repo_id: str, filenames: Sequence[str], revision: Optional[str]) -> Optional[str]:
    """Path of the first of ``filenames`` of the repo in the local cache (no network), or None."""
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename, revision=revision)
        if isinstance(found, str) and Path(found).is_file():
            return found
    return None


def _offline_reason() -> Optional[str]:
    """Why nothing can be downloaded now (offline mode, or the Hub's host does not resolve), else None."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
    except (OSError, UnicodeError):
        return "the Hub cannot be reached"
    return None


def unavailable(key: str, ref: str, repo_id: str, filenames: Sequence[str], why: str) -> WeightsUnavailable:
    """The one-line error of a Hub file that cannot be had now: cache folder, repo id and the fixes."""
    return WeightsUnavailable(
        f"{key}: {ref}: {' or '.join(filenames)} of Hub repo {repo_id} not in the Hugging Face cache "
        f"{_cache_dir()} and {why}; fix: run once with internet (the file is then cached), or `hf download "
        f"{repo_id}` (huggingface-cli download in older huggingface_hub) with the same HF_HOME / HF_HUB_CACHE, "
        + ("or set model.checkpoint to a local weights file" if key == "model.checkpoint" else
           "or set model.name to a timm name (e.g. vit_base_patch16_224) and model.checkpoint to a local weights "
           "file"))


def hub_file(key: str, ref: str, filenames: Sequence[str], revision: Optional[str], download: bool = True) -> str:
    """Local path of the first of ``filenames`` in the repo ``ref`` names: cached, else downloaded if allowed."""
    repo_id = split_reference(ref, key)[0]
    found = cached_file(repo_id, filenames, revision)
    if found is not None:
        return found
    why = _offline_reason() or (None if download else "a dry run never downloads (training would)")
    if why:
        raise unavailable(key, ref, repo_id, filenames, why)
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    for filename in filenames:
        try:
            return hf_hub_download(repo_id, filename, revision=revision)
        except EntryNotFoundError:
            continue
        except (OSError, ValueError) as err:  # network, unknown repo, gated repo (HfHubHTTPError is an OSError)
            raise unavailable(key, ref, repo_id, filenames, f"the download failed ({first_line(err)})") from err
    raise unavailable(key, ref, repo_id, filenames, "the repo has none of these files")


def checkpoint_file(ref: str, download: bool = True) -> str:
    """Local path of the weights file ``model.checkpoint: hf-hub:...`` names."""
    _, filename, revision = split_reference(ref, "model.checkpoint")
    return hub_file("model.checkpoint", ref, [filename] if filename else WEIGHT_FILES, revision, download)


def model_folder(name: str, pretrained: bool, download: bool = True) -> Tuple[str, Optional[str]]:
    """(snapshot folder holding config.json, weights file or None) of timm's ``hf_hub:ORG/NAME`` model name."""
    _, _, revision = split_reference(name, "model.name")
    config = hub_file("model.name", name, ["config.json"], revision, download)
    weights = hub_file("model.name", name, WEIGHT_FILES, revision, download) if pretrained else None
    return str(Path(config).parent), weights


def weights_file(model) -> Optional[str]:
    """The local file a run's backbone weights come from (``model``: the config's ``model`` section), or None
    for random init and timm-tag hub weights. Hub files are looked up in the cache only (never downloaded)."""
    if model.checkpoint:
        return checkpoint_file(model.checkpoint, download=False) if is_hub_reference(model.checkpoint) \
            else str(model.checkpoint)
    if model.pretrained and is_hub_reference(model.name):
        return model_folder(model.name, pretrained=True, download=False)[1]
    return None
