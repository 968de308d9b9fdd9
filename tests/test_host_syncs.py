"""Issue #68: the GPU never waits on the host in a training step.

On the CPU a host sync cannot be timed, so it is counted: during :func:`norga.toolkit.training.train_step` (the
per-batch step of every stage: forward, loss terms, backward, optimiser step; not the epoch bookkeeping) every
call that on CUDA would make the host wait for the device is recorded (:data:`PROBES`: ``.item()``, ``bool(t)``,
``float(t)``, ``.tolist()``, ``.cpu()``, boolean-mask indexing, ``nonzero`` ...), unless torch itself makes it
(e.g. Adam's CPU step counter) or it is the loss check that runs only on the CPU (:data:`CPU_ONLY`). Each
registered method's smoke config is trained through its second task with the probes on; a method whose step
cannot be sync-free yet is listed in :data:`KNOWN_SYNCS` with the reason (and must still sync: the list shrinks).
The other checks: the fixes of the issue keep the numbers (index masking is bit-identical) and the run's
resources (test loaders keep no workers, the backbone is hashed once per run).
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from conftest import REPO_ROOT
from norga.config import load_config, method_configs
from norga.engine import loaders as loaders_module
from norga.engine import task_loop
from norga.engine import tracker as tracker_module
from norga.methods.base import TaskLoaders
from norga.methods.l2p import count_selected
from norga.toolkit import training
from norga.toolkit.training import Stage, masked_cross_entropy, run_stage


TORCH_DIR = str(Path(torch.__file__).parent)
# torch.Tensor methods that read a device value on the host (on CUDA the host waits for every queued kernel)
PROBES = ("item", "tolist", "cpu", "numpy", "nonzero", "bincount", "unique", "masked_select",
          "__bool__", "__int__", "__float__", "__index__")
MASK_INDEXING = ("__getitem__", "__setitem__")  # a bool-tensor index is a nonzero() inside
# (file, function) that read the loss on the host only when it is on the CPU: a divergence stops at once there
CPU_ONLY = {("training.py", "_check")}
# method -> why its training step still syncs (empty: every registered method's step is sync-free)
KNOWN_SYNCS: dict = {}
NO_TRAINING_STEP = {"simplecil": "class means of frozen features, nothing trained by gradient",
                    "ranpac": "its smoke config has no first-session adapter (ranpac+adapter trains one)"}


class HostSyncs:
    """Host reads made in training steps (``calls``: "what at file:line (function)") and the steps run."""

    def __init__(self):
        self.active, self.steps, self.calls = 0, 0, []

    def note(self, what: str) -> None:
        if not self.active:
            return
        frame = sys._getframe(2)  # the code that called the probed function
        code = frame.f_code
        if code.co_filename.startswith(TORCH_DIR) or (Path(code.co_filename).name, code.co_name) in CPU_ONLY:
            return
        self.calls.append(f"{what} at {Path(code.co_filename).name}:{frame.f_lineno} ({code.co_name})")


def _probe(counter: HostSyncs, name: str, original):
    def probed(*args, **kwargs):
        counter.note(name)
        return original(*args, **kwargs)
    return probed


def _mask_probe(counter: HostSyncs, name: str, original):
    def probed(self, index, *rest):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts):
            counter.note(f"boolean-mask {name}")
        return original(self, index, *rest)
    return probed


@pytest.fixture
def syncs(monkeypatch) -> HostSyncs:
    """The probes on for every training step of this test (torch and the step restored afterwards)."""
    counter = HostSyncs()
    for name in PROBES:
        monkeypatch.setattr(torch.Tensor, name, _probe(counter, f".{name}", getattr(torch.Tensor, name)))
    for name in ("nonzero", "bincount", "unique", "masked_select"):
        monkeypatch.setattr(torch, name, _probe(counter, f"torch.{name}", getattr(torch, name)))
    for name in MASK_INDEXING:
        monkeypatch.setattr(torch.Tensor, name, _mask_probe(counter, name, getattr(torch.Tensor, name)))
    step = training.train_step

    def counted_step(*args, **kwargs):
        counter.active += 1
        counter.steps += 1
        try:
            return step(*args, **kwargs)
        finally:
            counter.active -= 1

    monkeypatch.setattr(training, "train_step", counted_step)
    return counter


class StopAfterTask1(Exception):
    """Ends a smoke run once its second task is learned (every kind of step has run: first and later tasks)."""


def train_two_tasks(method: str, out: Path, monkeypatch, overrides=()) -> None:
    """Train ``configs/smoke/<method>.yaml`` (with ``overrides``) into ``out`` up to the evaluation of its second
    task."""
    seen_tasks = task_loop.Evaluator.seen_tasks

    def until_task_1(self, task):
        if task >= 1:
            raise StopAfterTask1
        return seen_tasks(self, task)

    monkeypatch.setattr(task_loop.Evaluator, "seen_tasks", until_task_1)
    with pytest.raises(StopAfterTask1):
        task_loop.run_training(load_config(REPO_ROOT / "configs" / "smoke" / f"{method}.yaml", list(overrides)), out)


# each registered method's smoke config, and the stages its smoke config leaves out
RANPAC_ADAPTER = ["method.first_session.tuning=adapter", "method.first_session.epochs=1",
                  "method.first_session.bottleneck=8"]
CASES = [(name, []) for name in sorted(method_configs())] + [("ranpac", RANPAC_ADAPTER)]


@pytest.mark.parametrize("method, overrides", CASES, ids=[n + ("+adapter" if o else "") for n, o in CASES])
def test_a_training_step_never_reads_the_device(method, overrides, syncs, monkeypatch, tmp_path):
    train_two_tasks(method, tmp_path / method, monkeypatch, overrides)
    if overrides:
        method = f"{method}+adapter"
    assert (syncs.steps == 0) == (method in NO_TRAINING_STEP), f"{method}: {syncs.steps} training steps"
    if method in KNOWN_SYNCS:
        assert syncs.calls, f"{method} no longer syncs in its step: remove it from KNOWN_SYNCS"
    else:
        assert syncs.calls == [], f"{method}: {len(syncs.calls)} host syncs in training steps: {syncs.calls[:5]}"


def tiny_stage(steps: int = 3) -> tuple:
    """A linear head trained ``steps`` steps on random features through run_stage: (stage, batches, forward)."""
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 6)
    data = [(torch.randn(4, 8), torch.tensor([2, 3, 2, 4])) for _ in range(steps)]
    stage = Stage("probe", 0, 1, torch.optim.SGD(head.parameters(), lr=0.1), clip=1.0,
                  clip_params=list(head.parameters()), train_modules=[head])
    return stage, (lambda epoch: data), (lambda b: {"logits": head(b[0]), "labels": b[1]})


def test_the_shared_loop_and_cross_entropy_are_sync_free(syncs):
    stage, batches, forward = tiny_stage()
    allowed = torch.tensor([False, False, True, True, True, False])
    run_stage(stage, batches, forward, {"ce": training.cross_entropy_term(allowed)})
    assert syncs.steps == 3 and syncs.calls == []


PLANTED = {
    "item": lambda loss: loss.item(),
    "bool": lambda loss: bool(loss > 0),
    "float": lambda loss: float(loss.detach()),
    "cpu": lambda loss: loss.cpu(),
    "tolist": lambda loss: loss.reshape(1).tolist(),
    "mask": lambda loss: loss.reshape(1)[loss.reshape(1) > 0],
    "nonzero": lambda loss: loss.reshape(1).nonzero(),
}


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_a_planted_sync_in_the_step_is_caught(kind, syncs, monkeypatch):
    total = training.total

    def total_with_a_sync(values):
        loss = total(values)
        PLANTED[kind](loss)
        return loss

    monkeypatch.setattr(training, "total", total_with_a_sync)
    stage, batches, forward = tiny_stage()
    run_stage(stage, batches, forward, {"ce": training.cross_entropy_term(torch.ones(6, dtype=torch.bool))})
    assert len(syncs.calls) == 3 and all("test_host_syncs.py" in call for call in syncs.calls)


def test_a_planted_item_in_a_methods_step_is_caught(syncs, monkeypatch, tmp_path):
    pull = __import__("norga.methods.l2p", fromlist=["pull_loss"]).pull_loss

    def pull_with_item(sim, chosen):
        loss = pull(sim, chosen)
        loss.item()
        return loss

    monkeypatch.setattr("norga.methods.l2p.pull_loss", pull_with_item)
    train_two_tasks("l2p", tmp_path / "l2p", monkeypatch)
    assert syncs.steps > 0 and len(syncs.calls) == syncs.steps
    assert all(c.startswith(".item at test_host_syncs.py") for c in syncs.calls)


def boolean_mask_cross_entropy(logits, labels, allowed, label_smoothing):
    """The cross-entropy before issue #68: boolean-mask columns, cumsum positions."""
    position = torch.cumsum(allowed.long(), 0) - 1
    return F.cross_entropy(logits[:, allowed], position[labels], label_smoothing=label_smoothing)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_index_masking_is_bit_identical_to_the_boolean_mask(label_smoothing):
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        allowed = torch.rand(30, generator=g) < 0.4
        allowed[5] = True
        ids = allowed.nonzero().flatten()
        labels = ids[torch.randint(len(ids), (16,), generator=g)]
        a = torch.randn(16, 30, generator=g, requires_grad=True)
        b = a.detach().clone().requires_grad_()
        before = boolean_mask_cross_entropy(a, labels, allowed, label_smoothing)
        after = training.cross_entropy_term(allowed, label_smoothing)({"logits": b, "labels": labels})
        before.backward()
        after.backward()
        assert torch.equal(before, after) and torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("label", [0, 4])  # before every allowed class / between them
def test_a_label_outside_the_allowed_classes_is_refused(label):
    allowed = torch.tensor([False, True, True, False, False, True])
    with pytest.raises(ValueError, match="outside the allowed classes"):
        masked_cross_entropy(torch.randn(2, 6), torch.tensor([1, label]), allowed, 0.1)


def test_a_tasks_training_labels_are_checked_once_when_its_loaders_are_built():
    dataset = SimpleNamespace(labels=[2, 3, 3])
    loaders_module.check_task_labels(dataset, [[0, 1], [2, 3]], 1)
    with pytest.raises(ValueError, match=r"task 0: training labels \[2, 3\]"):
        loaders_module.check_task_labels(dataset, [[0, 1], [2, 3]], 0)


def test_l2p_counts_selections_on_the_device_like_bincount():
    chosen = torch.randint(0, 7, (32, 3), generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(7, dtype=torch.long)
    count_selected(counts, chosen)
    count_selected(counts, chosen[:5])
    expected = torch.bincount(chosen.flatten(), minlength=7) + torch.bincount(chosen[:5].flatten(), minlength=7)
    assert torch.equal(counts, expected)


def test_test_loaders_keep_no_workers_and_training_loaders_are_closed_after_the_task():
    cfg = load_config(None, ["device=cpu", "data.num_workers=1"])
    dataset = TensorDataset(torch.arange(8.0))
    test = loaders_module.ordered_loader(cfg, dataset, persistent=False)
    assert test.persistent_workers is False and test.num_workers == 1
    train = DataLoader(dataset, batch_size=4, **loaders_module.loader_options(cfg))
    assert train.persistent_workers is True
    assert len(list(train)) == 2
    workers = list(train._iterator._workers)
    assert workers and all(w.is_alive() for w in workers)  # persistent: alive between epochs
    loaders_module.close_loaders(TaskLoaders(train, test, test))
    assert train._iterator is None and not any(w.is_alive() for w in workers)


def test_the_evaluator_builds_one_test_loader_per_task_for_the_whole_run(monkeypatch):
    built = []
    monkeypatch.setattr(task_loop, "test_loader", lambda cfg, bench, task: built.append(task) or object())
    evaluator = task_loop.Evaluator.__new__(task_loop.Evaluator)
    evaluator.cfg, evaluator.bench, evaluator.loaders = None, None, {}
    for last in range(4):  # after each task: tasks 0..last
        for task in range(last + 1):
            evaluator.loader(task)
    assert built == [0, 1, 2, 3]


def fake_tracker(**kwargs) -> tracker_module.MetricsTracker:
    cfg = SimpleNamespace(seed=0, model=SimpleNamespace(preset=None, name="vit", checkpoint="w.pt", pretrained=False))
    bench = SimpleNamespace(num_tasks=2, class_order=[0, 1], task_classes=[[0], [1]], info=lambda: {})
    method = SimpleNamespace(name="fake", describe=lambda: {"name": "fake"})
    return tracker_module.MetricsTracker(cfg, bench, method, None, **kwargs)


def test_metrics_hash_the_backbone_once_per_run(monkeypatch):
    hashed = []
    monkeypatch.setattr(tracker_module, "weights_file", lambda model: model.checkpoint)
    monkeypatch.setattr(tracker_module, "checkpoint_id", lambda path: hashed.append(path) or "abcd")
    tracker = fake_tracker()
    metrics = [tracker.metrics() for _ in range(3)]
    assert hashed == ["w.pt"] and all(m["backbone"]["checkpoint_sha256_16"] == "abcd" for m in metrics)
    known = fake_tracker(backbone_sha256_16="1234")  # the run's InputsCheck already hashed it
    assert known.metrics()["backbone"]["checkpoint_sha256_16"] == "1234" and hashed == ["w.pt"]
