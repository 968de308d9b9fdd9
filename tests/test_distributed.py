"""Data parallelism (torchrun): sharding, weighted gradient averaging, gathered features and statistics, evaluation.

The samplers are checked in this process; the collective pieces in 2 ``gloo`` processes
(torch.multiprocessing, a file rendezvous); whole runs under ``torchrun`` (tests/
test_distributed_runs.py) compare with one process.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from faults import SMOKE, TINY
from norga.toolkit.distributed import (ContiguousShard, ShardedBatchSampler, average_gradients, gather_rows,
                                         synchronise_parameters)
from norga.errors import NorgaError

pytestmark = pytest.mark.integration  # trains whole runs: outside the fast loop (-m "not slow and not integration")


def _overrides():
    return [TINY[i + 1] for i in range(0, len(TINY), 2)]


# ---- samplers (one process) ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n,batch,world", [(23, 8, 2), (17, 8, 2), (16, 8, 3), (5, 8, 2), (30, 7, 4)])
def test_shards_of_every_global_batch_are_the_single_process_batches(n, batch, world):
    single = DataLoader(range(n), batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(3))
    generators = [torch.Generator().manual_seed(3) for _ in range(world)]
    sharded = [DataLoader(range(n), batch_sampler=ShardedBatchSampler(n, batch, world, r, g), generator=g)
               for r, g in enumerate(generators)]
    for _ in range(3):  # three epochs: a fresh permutation each, the one the shuffling DataLoader draws
        expected = [b.tolist() for b in single]
        if len(expected) > 1 and len(expected[-1]) < world:  # a last batch smaller than the processes is merged
            expected[-2:] = [expected[-2] + expected[-1]]
        shards = [[b.tolist() for b in loader] for loader in sharded]
        assert all(len(s) == len(loader) == len(expected) for s, loader in zip(shards, sharded))
        for step, global_batch in enumerate(expected):
            parts = [shards[r][step] for r in range(world)]
            assert sum(parts, []) == global_batch
            assert min(map(len, parts)) >= 1 and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_contiguous_shards_cover_the_dataset_once_in_order():
    parts = [list(ContiguousShard(11, 3, r)) for r in range(3)]
    assert parts == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10]]
    assert ContiguousShard(11, 3, 0).part_sizes() == [3, 4, 4]
    assert [len(ContiguousShard(1, 2, r)) for r in range(2)] == [0, 1]


def test_too_few_samples_or_too_small_a_batch_is_one_clear_error():
    with pytest.raises(NorgaError, match="cannot be split over 4 processes"):
        ShardedBatchSampler(3, 8, 4, 0, torch.Generator())
    with pytest.raises(NorgaError, match="batch size 2 is smaller than the 4 processes"):
        ShardedBatchSampler(30, 2, 4, 0, torch.Generator())


# ---- collectives (2 gloo processes) -----------------------------------------------------------------------------
def _run_in_processes(worker, tmp_path, *args, world: int = 2) -> dict:
    """Run ``worker`` in ``world`` gloo processes; what rank 0 saved. A worker killed by a signal (seen once on
    the shared 2-core CPU: SIGABRT, "terminate called without an active exception" from a native thread) is
    retried once in a fresh folder; a second crash, or any Python error, fails the test."""
    for attempt in range(2):
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        try:
            mp.spawn(worker, args=(world, str(folder / "rendezvous"), str(folder / "out.pt"), *args), nprocs=world)
            return torch.load(folder / "out.pt", weights_only=False)
        except mp.ProcessExitedException as crash:
            if attempt == 1 or crash.signal_name is None:
                raise
    raise AssertionError("unreachable")


def _join(rank: int, world: int, rendezvous: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)


def _collectives_worker(rank, world, rendezvous, out):
    _join(rank, world, rendezvous)
    try:
        shared, partial, unused = (nn.Parameter(torch.zeros(2)) for _ in range(3))
        shared.grad = torch.tensor([1.0, 2.0]) if rank == 0 else torch.tensor([5.0, -2.0])
        partial.grad = torch.tensor([4.0, 4.0]) if rank == 0 else None  # e.g. a prompt no sample of rank 1 chose
        weight = average_gradients([shared, partial, unused], samples=3 if rank == 0 else 1)
        gathered = gather_rows(torch.full((2 + rank, 2), float(rank)), [2, 3])
        diverged = nn.Parameter(torch.tensor([float(rank)]))
        try:
            synchronise_parameters([diverged], "stage x")
            error = None
        except NorgaError as err:
            error = str(err)
        rounding = nn.Parameter(torch.tensor([1.0 + rank * 1e-7, 2.0]))  # last-bit differences: rank 0's copy
        synchronise_parameters([rounding], "stage y")
        if rank == 1:
            torch.save(rounding.detach(), out + ".rank1")
        dist.barrier()
        if rank == 0:
            torch.save({"shared": shared.grad, "partial": partial.grad, "unused": unused.grad, "weight": float(weight),
                        "gathered": gathered, "error": error, "rounding": torch.load(out + ".rank1")}, out)
    finally:
        dist.destroy_process_group()


def test_gradients_are_the_sample_weighted_mean_and_rows_gather_in_rank_order(tmp_path):
    r = _run_in_processes(_collectives_worker, tmp_path)
    assert torch.equal(r["shared"], torch.tensor([(3 * 1 + 5) / 4, (3 * 2 - 2) / 4]))  # by hand: (3 g0 + 1 g1) / 4
    assert torch.equal(r["partial"], torch.tensor([3.0, 3.0]))  # rank 1 had none: counts zeros, 3 * 4 / 4
    assert r["unused"] is None and r["weight"] == 0.75
    assert torch.equal(r["gathered"], torch.tensor([[0.0, 0.0]] * 2 + [[1.0, 1.0]] * 3))
    assert "parameters differ after the stage" in r["error"]
    assert torch.equal(r["rounding"], torch.tensor([1.0, 2.0]))  # rank 1 took rank 0's values


def _training_worker(rank, world, rendezvous, out, feats, labels):
    _join(rank, world, rendezvous)
    try:
        head = _trained_head(feats, labels, ShardedBatchSampler(len(labels), len(labels), world, rank,
                                                                torch.Generator().manual_seed(0)))
        if rank == 0:
            torch.save(head.state_dict(), out)
    finally:
        dist.destroy_process_group()


def _trained_head(feats, labels, batch_sampler=None) -> nn.Module:
    from norga.toolkit.training import Stage, cross_entropy_term, run_stage

    torch.manual_seed(0)
    head = nn.Linear(feats.shape[1], 3)
    loader = DataLoader(TensorDataset(feats, labels), batch_sampler=batch_sampler,
                        **({} if batch_sampler else {"batch_size": len(labels)}))
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5)
    run_stage(Stage("wtp", 0, 3, optimizer, clip=0.5, clip_params=list(head.parameters())),
              batches=lambda epoch: loader, forward=lambda b: {"logits": head(b[0]), "labels": b[1]},
              terms={"ce": cross_entropy_term(torch.ones(3, dtype=torch.bool))})
    return head


def test_a_split_batch_trains_as_the_whole_batch_in_one_process(tmp_path):
    """7 samples in one global batch, split 4 + 3: averaged, clipped steps equal one process's whole-batch steps."""
    feats, labels = torch.randn(7, 5, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2, 0])
    split = _run_in_processes(_training_worker, tmp_path, feats, labels)
    single = _trained_head(feats, labels).state_dict()
    for key in single:
        torch.testing.assert_close(split[key], single[key], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(single["weight"], nn.Linear(5, 3).weight)  # it did train


def _features_worker(rank, world, rendezvous, out):
    from conftest import build_run_parts, loaders_of
    from norga.config import load_config
    from norga.engine.evaluate import evaluate_task
    from norga.toolkit.heads import class_mask

    _join(rank, world, rendezvous)
    try:
        cfg, bench, method = build_run_parts(load_config(SMOKE, _overrides()))
        loaders = loaders_of(cfg, bench, method, 0)
        result = _features_and_statistics(method, loaders)
        seen = class_mask(method.num_classes, method.seen_classes(0), method.device)
        result["evaluation"] = evaluate_task(method, 0, seen, loaders.test, method.device,
                                             method.new_eval_cache())
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def _features_and_statistics(method, loaders) -> dict:
    from norga.toolkit.gaussian import GaussianStore
    from norga.toolkit.stages import extract_features

    result = {}
    for name, prompt in (("frozen", None), ("prompted", method.task_prompts[0])):
        feats, labels = extract_features(method.model, loaders.train_plain, method.device, prompt)
        store = GaussianStore("covariance")
        for c in labels.unique().tolist():
            store.add(c, feats[labels == c])
        result[name] = (feats, labels, store.state_dict()["stats"])
    return result


def test_gathered_features_statistics_and_evaluation_equal_one_process(tmp_path):
    from conftest import build_run_parts, loaders_of
    from norga.config import load_config
    from norga.engine.evaluate import evaluate_task
    from norga.toolkit.heads import class_mask

    split = _run_in_processes(_features_worker, tmp_path)
    cfg, bench, method = build_run_parts(load_config(SMOKE, _overrides()))
    loaders = loaders_of(cfg, bench, method, 0)
    single = _features_and_statistics(method, loaders)
    for name in ("frozen", "prompted"):
        (feats, labels, stats), (ref_feats, ref_labels, ref_stats) = split[name], single[name]
        assert torch.equal(labels, ref_labels) and len(labels) == len(bench.train_set(0))  # each sample once
        torch.testing.assert_close(feats, ref_feats, rtol=1e-5, atol=1e-5)  # batched matmuls round differently
        assert sorted(stats) == sorted(ref_stats)
        for c in stats:
            for key in stats[c]:
                torch.testing.assert_close(stats[c][key], ref_stats[c][key], rtol=1e-4, atol=1e-5)
    seen = class_mask(method.num_classes, method.seen_classes(0), method.device)
    assert split["evaluation"] == evaluate_task(method, 0, seen, loaders.test, method.device, method.new_eval_cache())
