"""The whole-run lock-step check of L2P (crosscheck/harness/lockstep_norga.py, docs/crosscheck.md): the batches it
draws and replays are the ones an ordinary run trains on, so its accuracy matrix and its trained tensors equal the
ordinary run's; and ``--init`` puts a reference's head rows (indexed by original class id) on norga's rows."""
from __future__ import annotations

import pytest
import torch

from crosscheck.harness.lockstep_norga import lockstep
from conftest import SMOKE, load_run_method
from norga.config import load_config
from norga.engine import run_training
from test_l2p import L2P, TINY_DATA

ARGS = TINY_DATA + L2P + ["eval_mask_unseen=false"]  # the reference scores every class of the head


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "l2p"
    metrics = run_training(load_config(SMOKE, ARGS), out)
    return lockstep(SMOKE, ARGS), metrics, out


def test_the_lock_step_run_is_the_ordinary_run(both):
    step, metrics, out = both
    assert step["acc"] == metrics["acc_matrix"]
    _, _, method = load_run_method(out)
    last = step["after_task"][-1]
    assert torch.equal(last["prompts"], method.prompts.detach())
    assert torch.equal(last["keys"], method.keys.detach())
    assert torch.equal(last["head.weight"], method.head.weight.detach())
    assert not torch.equal(step["initial"]["prompts"], last["prompts"])  # training moved them


def test_the_saved_batches_are_the_tasks_training_sets(both):
    step, _, _ = both
    cfg = load_config(SMOKE, ARGS)
    for t, epochs in enumerate(step["batches"]):
        assert len(epochs) == cfg.method.epochs
        per_epoch = [torch.cat([y for _, y in batches]) for batches in epochs]
        for labels in per_epoch:  # every image of the task once per epoch, with the task's labels only
            assert len(labels) == cfg.data.classes_per_task * 12
            assert set(labels.tolist()) == set(step["task_classes"][t])
        assert not torch.equal(per_epoch[0], per_epoch[1])  # reshuffled per epoch


def test_initial_tensors_are_mapped_by_class_order(tmp_path):
    cfg = load_config(SMOKE, ARGS)
    first = lockstep(SMOKE, ARGS)["initial"]
    classes = cfg.data.classes_per_task * cfg.data.num_tasks
    init = {"prompts": torch.full_like(first["prompts"], 0.5), "keys": torch.full_like(first["keys"], -0.5),
            # row r holds the value r: after loading, norga's row p must hold its class id class_order[p]
            "head.weight": torch.arange(classes, dtype=torch.float32)[:, None].expand_as(first["head.weight"]).clone(),
            "head.bias": -torch.arange(classes, dtype=torch.float32)}
    torch.save(init, tmp_path / "init.pt")
    step = lockstep(SMOKE, ARGS, tmp_path / "init.pt")
    order = step["class_order"]
    assert order != sorted(order)  # the test needs a shuffled class order
    loaded = step["initial"]
    assert torch.equal(loaded["prompts"], init["prompts"]) and torch.equal(loaded["keys"], init["keys"])
    assert loaded["head.weight"][:, 0].tolist() == [float(c) for c in order]
    assert loaded["head.bias"].tolist() == [-float(c) for c in order]
