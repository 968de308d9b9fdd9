"""The frozen-feature store (``norga train --feature-cache DIR``, :mod:`norga.toolkit.feature_store`): the same
numbers with and without it, rows reused across seeds, corrupt parts recomputed, the random state untouched."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import SHORT_SMOKE, SMOKE, build_run_parts, loaders_of, tiny_vit
from norga.config import load_config
from norga.data.benchmark import ArrayImageDataset
from norga.engine import run_training
from norga.models.prompted_vit import PromptedViT
from norga.toolkit.feature_store import FeatureStore, open_store
from norga.toolkit.stages import extract_features

SIMPLECIL = SMOKE.parent / "smoke" / "simplecil.yaml"
HIDELORA = SMOKE.parent / "smoke" / "hidelora.yaml"
TIMES = ("task_seconds",)


def same_except_times(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in TIMES} == {k: v for k, v in b.items() if k not in TIMES}


def same_method_states(a: Path, b: Path) -> bool:
    """The last checkpoints' method states (prompts, heads, statistics, prototypes) are equal tensor for tensor."""
    def flat(state, prefix=""):
        if isinstance(state, (dict, list, tuple)):
            items = state.items() if isinstance(state, dict) else enumerate(state)
            return {k: v for key, value in items for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix: state}

    last = sorted((a / "checkpoints").glob("task_*.pt"))[-1].name
    x, y = (flat(torch.load(d / "checkpoints" / last, weights_only=True)["method"]) for d in (a, b))
    return x.keys() == y.keys() and all(torch.equal(v, y[k]) if isinstance(v, torch.Tensor) else v == y[k]
                                        for k, v in x.items())


def store_counts(run_dir: Path):
    """(rows read, rows computed) of the run's feature store, from its log."""
    found = re.findall(r"(\d+) frozen feature rows read, (\d+) computed", (run_dir / "log.txt").read_text())
    return tuple(int(n) for n in found[-1])


def parts(cache: Path):
    return sorted(p.name for p in cache.rglob("part-*.safetensors"))


def test_a_prototype_run_does_not_import_scikit_learn():
    """Start-up: scikit-learn (about 2 s with SciPy) is imported only where KMeans runs (multi-centroid statistics,
    S-Prompts)."""
    code = ("import sys, norga.engine, norga.methods.hideprompt, norga.methods.simplecil; "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


def test_a_frozen_row_does_not_depend_on_its_batch():
    """What makes stored rows equal fresh ones: the frozen forward is per sample on this platform."""
    model = PromptedViT(tiny_vit(0), prompt_layers=()).eval()
    x = torch.randn(70, 3, 32, 32)
    with torch.no_grad():
        whole = model(x)
        pieces = torch.cat([model(x[i:i + 9]) for i in range(0, 70, 9)])
        order = torch.randperm(70)
        shuffled = model(x[order])[order.argsort()]
    assert torch.equal(whole, pieces) and torch.equal(whole, shuffled)


def test_reading_and_computing_leave_the_random_state_as_extraction_does(tmp_path):
    cfg, bench, method = build_run_parts(load_config(SMOKE, SHORT_SMOKE))
    loader = loaders_of(cfg, bench, method, 0).train_plain
    store = open_store(tmp_path, method.model.vit, cfg)

    def state_after(extract):
        torch.manual_seed(3)
        feats, labels = extract()
        return feats, labels, torch.get_rng_state()

    plain = state_after(lambda: extract_features(method.model, loader, method.device))
    for expected_read in (0, len(loader.dataset)):  # computed, then read
        stored = state_after(lambda: store.loader_features(method.model, loader, method.device, "test"))
        assert all(torch.equal(a, b) for a, b in zip(plain, stored))
        assert store.read == expected_read


def test_only_the_missing_rows_are_computed(tmp_path):
    """A data set sharing some images with an earlier one (another seed's subsample) reads those and computes the
    rest; the rows equal a fresh extraction of the whole data set."""
    cfg, bench, method = build_run_parts(load_config(SMOKE, SHORT_SMOKE))
    first, second = bench.test_set(0), bench.test_set(1)
    both = ArrayImageDataset(np.concatenate([second.images, first.images]),
                             np.concatenate([second.labels, first.labels]), first.transform)
    store = open_store(tmp_path, method.model.vit, cfg)
    store.dataset_features(method.model, first, method.device, "test")
    feats, labels = store.dataset_features(method.model, both, method.device, "test")
    assert (store.read, store.computed) == (len(first), len(first) + len(second))
    fresh, fresh_labels = extract_features(method.model, DataLoader(both, batch_size=16), method.device)
    assert torch.equal(feats, fresh) and torch.equal(labels, fresh_labels)


def test_lora_branches_keep_the_feature_space_until_a_pass_applies_them():
    """HiDe-LoRA adds a branch per task and switches them all off in a frozen pass: one feature space for every
    task; a pass that applies branches, and a model without the wrappers, each get another one."""
    from norga.models.lora_qkv import attach_lora_qkv
    from norga.toolkit.feature_store import forward_fingerprint

    vit = tiny_vit(0)
    plain = forward_fingerprint(vit)
    wrappers = attach_lora_qkv(vit, [0, 1], ["k", "v"])
    for w in wrappers.values():
        w.active = ()
    no_branch = forward_fingerprint(vit)
    for w in wrappers.values():
        w.add_branch(2), w.add_branch(2)
    assert forward_fingerprint(vit) == no_branch != plain
    assert all("branches applied: none" in line for line in no_branch if "LoRAQKV" in line)
    wrappers["0"].active = None  # both branches of block 0 applied: not a frozen pass
    applied = forward_fingerprint(vit)
    assert applied != no_branch and any("branches applied: 0,1" in line for line in applied)


def test_a_corrupt_part_is_recomputed_never_used(tmp_path):
    cfg, bench, method = build_run_parts(load_config(SMOKE, SHORT_SMOKE))
    dataset = bench.test_set(0)
    store = open_store(tmp_path, method.model.vit, cfg)
    first, _ = store.dataset_features(method.model, dataset, method.device, "test")
    (part,) = tmp_path.rglob("part-*.safetensors")
    data = bytearray(part.read_bytes())
    data[-5] ^= 0xFF  # one feature byte
    part.write_bytes(bytes(data))
    warnings = []
    fresh = FeatureStore(tmp_path, store.backbone, store.context, cfg.eval_batch_size)
    fresh._warn = warnings.append
    again, _ = fresh.dataset_features(method.model, dataset, method.device, "test")
    assert torch.equal(first, again) and fresh.computed == len(dataset) and fresh.read == 0
    assert len(warnings) == 1 and str(part) in warnings[0] and part.name in parts(tmp_path)  # rewritten intact


@pytest.mark.integration
@pytest.mark.parametrize("config,overrides", [(SMOKE, SHORT_SMOKE), (SIMPLECIL, []), (HIDELORA, [])],
                         ids=["norga", "simplecil", "hidelora"])
def test_same_metrics_with_and_without_the_store_and_a_second_seed_reuses_rows(tmp_path, config, overrides):
    """Runs of seed 0 and 1 with and without the store; the backbone is a checkpoint, so both seeds share it."""
    weights = tmp_path / "tiny.pth"
    torch.save(tiny_vit(7).state_dict(), weights)
    cache = tmp_path / "cache"

    def run(seed: int, store: bool) -> dict:
        cfg = load_config(config, overrides + [f"seed={seed}", f"model.checkpoint={weights}"])
        out = tmp_path / f"s{seed}_{'store' if store else 'plain'}"
        run_training(cfg, out, feature_cache=cache if store else None)
        return json.loads((out / "metrics.json").read_text())

    assert same_except_times(run(0, False), run(0, True))
    assert same_method_states(tmp_path / "s0_plain", tmp_path / "s0_store")
    read, computed = store_counts(tmp_path / "s0_store")
    assert computed > 0
    assert len(list(cache.glob("*/space.json"))) == 1  # one feature space for every task (HiDe-LoRA: 1, not 1 per task)
    written = parts(cache)
    second = run(1, True)
    read, computed = store_counts(tmp_path / "s1_store")
    assert computed == 0 and read > 0 and parts(cache) == written  # every frozen row of seed 1 came from seed 0
    assert same_except_times(second, run(1, False))
    assert same_method_states(tmp_path / "s1_plain", tmp_path / "s1_store")
    assert second["class_order"] != json.loads((tmp_path / "s0_store" / "metrics.json").read_text())["class_order"]


@pytest.mark.integration
def test_reproduce_shares_one_store_across_the_seeds_of_a_grid(tmp_path, capsys):
    """norga reproduce --feature-cache: the second seed of a cell computes no frozen row; the printed commands
    carry the store."""
    import yaml

    from norga.commands.cli import main as norga

    weights = tmp_path / "tiny.pth"
    torch.save(tiny_vit(7).state_dict(), weights)
    manifest = tmp_path / "grid.yaml"
    manifest.write_text(yaml.safe_dump({"paper": "t", "seeds": [0, 1], "cells": [
        {"id": "c", "table": 1, "benchmark": "synthetic", "backbone": "tiny", "method": "simplecil",
         "config": str(SIMPLECIL), "overrides": [f"model.checkpoint={weights}"], "expected": {"FA": [0, 100]}}]}))
    common = ["reproduce", "--manifest", str(manifest), "--out", str(tmp_path / "grid"),
              "--feature-cache", str(tmp_path / "cache")]
    assert norga(common + ["--print-commands"]) == 0
    assert capsys.readouterr().out.count(f"--feature-cache {tmp_path / 'cache'}") == 2
    assert norga(common) == 0
    assert store_counts(tmp_path / "grid" / "c" / "seed0")[1] > 0
    read, computed = store_counts(tmp_path / "grid" / "c" / "seed1")
    assert computed == 0 and read > 0


@pytest.mark.integration
def test_eval_reads_the_runs_frozen_test_features_and_gives_its_metrics(tmp_path, capsys):
    """norga eval --feature-cache (run folder and export): every frozen row read, none computed, same matrices."""
    from norga.commands.cli import main as norga

    weights = tmp_path / "tiny.pth"
    torch.save(tiny_vit(7).state_dict(), weights)
    cache, run = tmp_path / "cache", tmp_path / "run"
    run_training(load_config(SIMPLECIL, [f"model.checkpoint={weights}"]), run, feature_cache=cache)
    written = parts(cache)
    trained = json.loads((run / "metrics.json").read_text())
    assert norga(["export", "--run", str(run), "--out", str(tmp_path / "export")]) == 0
    for source in (["--run", str(run)], ["--from", str(tmp_path / "export")]):
        capsys.readouterr()
        assert norga(["eval", *source, "--feature-cache", str(cache), "--output", str(tmp_path / "e.json")]) == 0
        read, computed = (int(n) for n in re.findall(r"(\d+) frozen feature rows read, (\d+) computed",
                                                     capsys.readouterr().out)[-1])
        assert computed == 0 and read > 0 and parts(cache) == written
        evaluated = json.loads((tmp_path / "e.json").read_text())
        assert evaluated["acc_matrix"] == trained["acc_matrix"] and evaluated["FA"] == trained["FA"]
