"""MOS (norga/methods/mos.py, mos_parts.py): the adapter merge, the test adapters, the self-refined retrieval and
the ensemble against hand computations; the training forward's merges and the regulariser's inputs on the tiny
smoke ViT; a smoke run whose saved test adapters are checked against the running sums."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from conftest import build_run_parts, loaders_of, train_smoke_run
from norga.config import ConfigError, load_config
from norga.methods import mos as mos_module
from norga.methods.mos_parts import accumulate_, class_batches, ensemble, merge_, refine, set_test_adapter_
from norga.models.adapters import BottleneckAdapter

MOS_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "mos.yaml"


def _adapter(value: float) -> BottleneckAdapter:
    """A D=2, r=1 adapter with every parameter filled with ``value`` (dropout off)."""
    a = BottleneckAdapter(2, 1, scale=0.1, dropout=0.0)
    with torch.no_grad():
        for p in a.parameters():
            p.fill_(value)
    return a


def test_merge_by_hand():
    """W = 2, S = 6 over 2 saved adapters, beta = 0.1: 0.9 * 2 + 0.1 * 6 / 2 = 2.1; nothing saved: unchanged."""
    current, sums = [_adapter(2.0)], [_adapter(6.0)]
    merge_(current, sums, saved=2, beta=0.1)
    assert all(torch.allclose(p, torch.full_like(p, 2.1)) for p in current[0].parameters())
    merge_(current, sums, saved=0, beta=0.1)
    assert all(torch.allclose(p, torch.full_like(p, 2.1)) for p in current[0].parameters())


def test_merge_rebinds_so_a_pending_backward_keeps_the_forward_values():
    """down.W = (1, 1), up.W = (2, 3), biases 0, x = (1, 2): down(x) = 3 > 0, so d sum(adapter(x)) / dx =
    0.1 * (2 + 3) * (1, 1) = (0.5, 0.5) with the weights of the forward, whatever the merge does afterwards."""
    a = BottleneckAdapter(2, 1, scale=0.1, dropout=0.0)
    with torch.no_grad():
        a.down.weight.copy_(torch.tensor([[1.0, 1.0]]))
        a.up.weight.copy_(torch.tensor([[2.0], [3.0]]))
        a.down.bias.zero_()
        a.up.bias.zero_()
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    y = a(x).sum()
    merge_([a], [_adapter(-50.0)], saved=1, beta=0.5)  # the weights change before the backward
    y.backward()
    assert torch.allclose(x.grad, torch.tensor([[0.5, 0.5]]))
    assert torch.allclose(a.up.weight, torch.tensor([[-24.0], [-23.5]]))  # 0.5 * (2, 3) + 0.5 * -50


@pytest.mark.parametrize("mode,task,expected", [("prefix_mean", 2, 3.0), ("prefix_mean", 0, 2.0), ("stored", 2, 2.0)])
def test_test_adapter_by_hand(mode, task, expected):
    """Current W = 2, S = 6: prefix_mean gives S / task = 3 for task 2 and W for task 0; stored gives W."""
    target = [_adapter(0.0)]
    set_test_adapter_(target, [_adapter(2.0)], [_adapter(6.0)], task, mode)
    assert all(torch.allclose(p, torch.full_like(p, expected)) for p in target[0].parameters())


def test_accumulate_by_hand():
    sums = [_adapter(6.0)]
    accumulate_(sums, [_adapter(2.0)])
    assert all(torch.allclose(p, torch.full_like(p, 8.0)) for p in sums[0].parameters())


CLASS_TO_TASK = torch.tensor([0, 0, 1, 1, 2, 2])


def _onehot(*classes):
    return torch.stack([torch.eye(6)[c] for c in classes])


def test_refine_follows_the_predictions_until_they_settle():
    """The features are the logits (head = identity). Adapter 0 points to class 2 (task 1), adapter 1 to class 5
    (task 2), adapter 2 to class 4 (task 2): 0 -> 1 -> 2 -> settled; the logits are adapter 2's."""
    feats = _onehot(2, 5, 4)[None]  # (B=1, T=3, D=6)
    logits, chosen = refine(feats, torch.tensor([0]), lambda f: f, CLASS_TO_TASK, steps=4)
    assert chosen.tolist() == [2] and torch.equal(logits, _onehot(4))


def test_refine_stops_after_steps_in_a_cycle():
    """Adapter 0 points to task 1, adapter 1 to task 0: evaluations at 0, 1, 0, 1 (4 steps); the answer is the
    last evaluated adapter, 1, with its logits (class 0)."""
    feats = _onehot(2, 0, 4)[None]
    logits, chosen = refine(feats, torch.tensor([0]), lambda f: f, CLASS_TO_TASK, steps=4)
    assert chosen.tolist() == [1] and torch.equal(logits, _onehot(0))
    logits, chosen = refine(feats, torch.tensor([0]), lambda f: f, CLASS_TO_TASK, steps=3)
    assert chosen.tolist() == [0] and torch.equal(logits, _onehot(2))


def test_ensemble_by_hand():
    """refined (0, ln 3, -inf) -> softmax (1/4, 3/4, 0); prototype logits (0, ln 2 / 2, -inf) times T = 2 ->
    softmax (1/3, 2/3, 0); the sum (7/12, 17/12, 0)."""
    inf = float("inf")
    out = ensemble(torch.tensor([[0.0, math.log(3), -inf]]), torch.tensor([[0.0, math.log(2) / 2, -inf]]), 2)
    assert torch.allclose(out, torch.tensor([[7 / 12, 17 / 12, 0.0]]))


def _method(**options):
    cfg = load_config(MOS_SMOKE)
    for key, value in options.items():
        setattr(cfg.method, key, value)
    return build_run_parts(cfg)


@pytest.mark.parametrize("merge,merges", [("per_block", 2), ("per_step", 0)])
def test_the_training_forward_merges_before_every_adapted_block(merge, merges):
    """One saved adapter (S), slot 0 at W: after one training forward slot 0 is S + (W - S) 0.9^n, n = the number of
    adapted blocks (2 in the smoke ViT) under per_block, 0 under per_step; test adapters never merge."""
    _, _, method = _method(merge=merge)
    with torch.no_grad():
        for t in method.tuned:
            for p in t[0].parameters():
                p.fill_(1.0)
        for s in method.sums:
            for p in s.parameters():
                p.fill_(3.0)
    method.learned_tasks = 1
    x = torch.randn(2, 3, 32, 32)
    method._current_features(x)
    expected = 3.0 + (1.0 - 3.0) * 0.9 ** merges
    assert all(torch.allclose(p, torch.full_like(p, expected)) for t in method.tuned for p in t[0].parameters())


def test_training_step_terms_and_the_regulariser_inputs(monkeypatch):
    """Task 1: the regulariser gets the training features and the stored means of task 0's classes at temperature
    0.8; the CE covers task 1's classes only (a task-0 label would raise)."""
    cfg, bench, method = _method(epochs=1)
    seen = []

    def spy(features, prototypes, temperature):
        seen.append((features.detach().clone(), prototypes, temperature))
        return features.sum() * 0

    monkeypatch.setattr(mos_module, "official_contrastive_regulariser", spy)
    gen = torch.Generator().manual_seed(0)
    for c in bench.task_classes[0]:
        method.store.add(c, torch.randn(5, method.model.embed_dim, generator=gen))
    method.learned_tasks = 1
    method.train_adapter(1, loaders_of(cfg, bench, method, 1).train)
    assert seen and all(t == 0.8 for _, _, t in seen)
    assert torch.equal(seen[0][1], method.store.means(bench.task_classes[0]))


def test_class_batches_by_hand():
    """Rows of class 1 (0, 2, 3) in twos, then class 0's (1, 4): the code's per-class loaders, class by class."""
    assert class_batches([1, 0, 1, 1, 0], [1, 0], 2) == [[0, 2], [3], [1, 4]]


def _fill(adapters, value: float) -> None:
    with torch.no_grad():
        for a in adapters:
            for p in a.parameters():
                p.fill_(value)


def _statistics_setup(**options):
    """Task 2 of the smoke run (2 classes x 12 images, 2 adapted blocks): slot 0 at W = 1, the sum over tasks 0, 1
    S_2 = 6 (``earlier``), the running sums at 100 (what S_3 would hold)."""
    cfg, bench, method = _method(**options)
    _fill(method.current, 1.0)
    _fill(method.sums, 100.0)
    earlier = copy.deepcopy(method.sums)
    _fill(earlier, 6.0)
    method.learned_tasks = 2
    return method, loaders_of(cfg, bench, method, 2).train_plain, earlier, bench.task_classes[2]


def _slot0_values(method):
    return {round(float(v), 5) for a in method.current for p in a.parameters() for v in p.detach().flatten()}


def test_statistics_forwards_merge_towards_the_earlier_mean_class_by_class():
    """merging (the code's _compute_mean): one batch per class (12 images <= 3 x batch 8), class after class; each
    forward merges slot 0 before both adapted blocks towards S_2 / 2 = 3, never towards the running sums. The
    features equal an independent forward in which block b of forward n sees slot 0 at 3 - 2 * 0.9^(2n + b + 1)
    (iterated in float32), and slot 0 leaves at 3 - 2 * 0.9^4."""
    method, plain, earlier, classes = _statistics_setup()
    images = torch.stack([plain.dataset[i][0] for i in range(len(plain.dataset))])
    labels = torch.as_tensor(plain.dataset.labels)
    feats, got_labels = method.statistics_features(2, plain, earlier)
    assert got_labels.tolist() == [classes[0]] * 12 + [classes[1]] * 12
    assert _slot0_values(method) == {round(3 - 2 * 0.9 ** 4, 5)}

    value, total = [torch.tensor(1.0)], torch.tensor(6.0)

    def schedule(block, args):  # W <- 0.9 W + 0.1 S / 2 in float32, in the formula's order of operations
        value[0] = (1 - 0.1) * value[0] + 0.1 * total / 2
        _fill(method.current, float(value[0]))

    hooks = [b.register_forward_pre_hook(schedule) for b in method.blocks]
    try:
        with torch.no_grad(), mos_module.tuning(method.model, 0):
            expected = torch.cat([method.model(images[labels == c]) for c in classes])
    finally:
        for h in hooks:
            h.remove()
    assert torch.allclose(feats, expected, atol=1e-6)


def test_statistics_under_the_trained_adapter_do_not_merge():
    """stats_adapter: trained: slot 0 stays at W = 1 and the features are the plain forward under it."""
    method, plain, earlier, _ = _statistics_setup(stats_adapter="trained")
    feats, labels = method.statistics_features(2, plain, earlier)
    assert _slot0_values(method) == {1.0}
    with torch.no_grad(), mos_module.tuning(method.model, 0):
        expected = torch.cat([method.model(x) for x, _ in plain])
    assert torch.allclose(feats, expected, atol=1e-6) and labels.tolist() == plain.dataset.labels.tolist()


def test_learn_task_takes_the_statistics_towards_the_sum_before_saving(monkeypatch):
    """learn_task hands the statistics the sums as they were before this task's adapter was added (S_t), while the
    running sums already hold S_t + W_t."""
    cfg, bench, method = _method(epochs=1, ca_epochs=0)
    seen = []
    original = mos_module.MOS.statistics_features

    def spy(self, task, plain, earlier):
        seen.append(([p.clone() for p in earlier.parameters()], [p.clone() for p in self.sums.parameters()]))
        return original(self, task, plain, earlier)

    monkeypatch.setattr(mos_module.MOS, "statistics_features", spy)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    before = [p.clone() for p in method.sums.parameters()]
    method.learn_task(1, loaders_of(cfg, bench, method, 1))
    earlier, running = seen[1]
    assert all(torch.equal(a, b) for a, b in zip(earlier, before))
    assert not all(torch.equal(a, b) for a, b in zip(running, before))


@pytest.fixture(scope="module")
def mos_run(tmp_path_factory):
    return train_smoke_run(tmp_path_factory, MOS_SMOKE, "mos")[1]


def _slot(state, block, k):
    prefix = f"{block}.{k}."
    return {key[len(prefix):]: v for key, v in state["tuned"].items() if key.startswith(prefix)}


def test_saved_test_adapters_are_the_prefix_means_and_never_change(mos_run):
    """Test adapter of task t (slot 1 + t): task 1's equals S after task 0, task 2's S after task 1 over 2; every
    test adapter stays as saved in later checkpoints."""
    states = [torch.load(p, weights_only=True)["method"] for p in sorted((mos_run / "checkpoints").glob("task_*.pt"))]
    assert [s["learned_tasks"] for s in states] == [1, 2, 3]
    sums = lambda s, b: {k[len(f"{b}."):]: v for k, v in s["sums"].items() if k.startswith(f"{b}.")}  # noqa: E731
    for b in range(2):
        assert all(torch.equal(_slot(states[1], b, 2)[k], v) for k, v in sums(states[0], b).items())
        assert all(torch.allclose(_slot(states[2], b, 3)[k], v / 2) for k, v in sums(states[1], b).items())
        for t in range(3):
            for later in states[t + 1:]:
                assert all(torch.equal(v, _slot(later, b, t + 1)[k]) for k, v in _slot(states[t], b, t + 1).items())


def test_bad_options_name_their_key():
    from norga.methods.mos_config import MOSConfig

    with pytest.raises(ConfigError, match="method.adapter_layers"):
        MOSConfig(adapter_layers=[])
    with pytest.raises(ConfigError, match="method.min_lr"):
        MOSConfig(min_lr=1.0, lr=0.1)
