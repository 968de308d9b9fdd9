"""EASE (norga/methods/ease.py): the prototype complement and the reweighted logits against hand computations, and a
smoke run through ``norga train`` whose subspaces, frozen old adapters, prototypes and accuracies are recomputed
by hand."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import adapted_by_hand, build_run_parts, loaders_of, train_smoke_run
from norga.config import ConfigError, load_config
from norga.methods.ease import complement, subspace_weights, synthesise

EASE_SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke" / "ease.yaml"


def test_synthesise_by_hand():
    """One old class at (1, 0) in its own subspace; donors at (1, 0) and (0, 1) there, at (2, 0) and (0, 4) in the
    new subspace. cos = (1, 0); softmax row = (e, 1) / (e + 1); P = (2e, 4) / (e + 1)."""
    old = torch.tensor([[1.0, 0.0]])
    donors_old = torch.tensor([[3.0, 0.0], [0.0, 0.5]])  # scale does not matter: cosine
    donors_new = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    e = math.e
    expected = torch.tensor([[2 * e / (e + 1), 4 / (e + 1)]])
    assert torch.allclose(synthesise(old, donors_old, donors_new), expected)


def _by_hand(old, donors_old, donors_new):
    """The complement written out row by row: w_j = exp(cos_j) / sum_k exp(cos_k); sum_j w_j * donor_new_j."""
    rows = []
    for o in old:
        cos = [float(o @ a / (o.norm() * a.norm())) for a in donors_old]
        z = sum(math.exp(c) for c in cos)
        rows.append(sum(math.exp(c) / z * b for c, b in zip(cos, donors_new)))
    return torch.stack(rows)


def test_softmax_over_old_classes_by_hand():
    """``complement_softmax: old_classes`` (the paper's eq. 8): each donor's weights over the old classes sum to 1,
    W[i, j] = exp(cos_ij) / sum_i' exp(cos_i'j); P[i] = sum_j W[i, j] donor_new_j. Two old classes at (1, 0) and
    (0, 1), donors at (1, 0) and (1, 1): cos = [[1, 1/sqrt 2], [0, 1/sqrt 2]]."""
    old = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    donors_old = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    donors_new = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    e = math.e  # the second donor's column: both cosines 1/sqrt 2, so its weights are 1/2 and 1/2
    w = torch.tensor([[e / (e + 1), 0.5], [1 / (e + 1), 0.5]])  # columns sum to 1; rows need not
    expected = w @ donors_new
    assert torch.allclose(synthesise(old, donors_old, donors_new, "old_classes"), expected)
    assert not torch.allclose(synthesise(old, donors_old, donors_new, "donors"), expected)
    protos = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(1))
    before = protos.clone()
    complement(protos, [[0, 1], [2, 3]], 1, recalc=False, over="old_classes")  # the option reaches complement
    torch.testing.assert_close(protos[[0, 1], 1], synthesise(before[[0, 1], 0], before[[2, 3], 0],
                                                             before[[2, 3], 1], "old_classes"))


@pytest.mark.parametrize("recalc", [True, False])
def test_complement_fills_old_classes_in_later_subspaces(recalc):
    """3 tasks x 2 classes: after task 2, subspace 1 of task 0's classes (donors: tasks 1-2, recalc only), and
    subspace 2 of tasks 0 and 1 (donors: task 2), each from similarities in the old classes' own subspace."""
    gen = torch.Generator().manual_seed(0)
    tasks = [[4, 2], [1, 0], [5, 3]]
    protos = torch.randn(6, 3, 5, generator=gen)
    before = protos.clone()
    complement(protos, tasks, 2, recalc)
    t0, t1, t2 = tasks
    assert torch.allclose(protos[t0, 2], _by_hand(before[t0, 0], before[t2, 0], before[t2, 2]), atol=1e-6)
    assert torch.allclose(protos[t1, 2], _by_hand(before[t1, 1], before[t2, 1], before[t2, 2]), atol=1e-6)
    if recalc:
        assert torch.allclose(protos[t0, 1], _by_hand(before[t0, 0], before[t1 + t2, 0], before[t1 + t2, 1]),
                              atol=1e-6)
    else:
        assert torch.equal(protos[t0, 1], before[t0, 1])
    real = [(c, k) for t, cs in enumerate(tasks) for c in cs for k in range(t + 1)]  # subspaces 0..own task
    assert all(torch.equal(protos[c, k], before[c, k]) for c, k in real)


def test_subspace_weights_by_hand():
    class_to_task = torch.tensor([0, 0, 1, 2])
    w = subspace_weights(class_to_task, 3, 0.1, over_tasks=True)  # alpha / t with t = 2 other subspaces
    assert torch.allclose(w, torch.tensor([[1, .05, .05], [1, .05, .05], [.05, 1, .05], [.05, .05, 1]]))
    assert torch.allclose(subspace_weights(class_to_task, 3, 0.1, over_tasks=False)[2], torch.tensor([.1, 1, .1]))
    assert torch.equal(subspace_weights(class_to_task[:2], 1, 0.1, True), torch.ones(2, 1))


@pytest.fixture(scope="module")
def ease_run(tmp_path_factory):
    return train_smoke_run(tmp_path_factory, EASE_SMOKE, "ease")


def _states(out):
    return [torch.load(p, weights_only=True)["method"] for p in sorted((out / "checkpoints").glob("task_*.pt"))]


def _adapter(state, block, k):
    prefix = f"{block}.{k}."
    return {key[len(prefix):]: v for key, v in state["tuned"].items() if key.startswith(prefix)}


def test_a_subspace_per_task_and_old_adapters_never_change(ease_run):
    cfg, out, metrics = ease_run
    states = _states(out)
    assert [s["subspaces"] for s in states] == [1, 2, 3] and metrics["method"]["subspaces"] == 3
    for t, s in enumerate(states):
        assert {key.split(".")[1] for key in s["tuned"]} == {str(k) for k in range(t + 1)}
        assert all(_adapter(s, b, t)["up.weight"].abs().sum() > 0 for b in range(2))  # subspace t was trained
    for t in range(3):
        for later in states[t + 1:]:
            for b in range(2):
                old, now = _adapter(states[t], b, t), _adapter(later, b, t)
                assert all(torch.equal(old[k], now[k]) for k in old)
    log = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert {row["task"] for row in log if row["stage"] == "ease"} == {0, 1, 2}


def test_prototypes_complement_and_accuracy_by_hand(ease_run):
    """Real prototypes: class means of phi_k over the un-augmented images, for k <= the class's task; the rest
    from the complement written out; final accuracy from the reweighted cosines written out."""
    cfg, out, metrics = ease_run
    _, bench, method = build_run_parts(cfg)
    vit = method.model.vit
    vit.eval()
    final = _states(out)[-1]
    tasks = bench.task_classes

    def phi(x, k):
        with torch.no_grad():
            return adapted_by_hand(vit, x, [_adapter(final, b, k) for b in range(2)])

    protos = torch.zeros(6, 3, 64)
    for t in range(3):
        xs, ys = zip(*loaders_of(cfg, bench, method, t).train_plain)
        x, y = torch.cat(xs), torch.cat(ys)
        for k in range(t + 1):
            feats = phi(x, k)
            for c in tasks[t]:
                protos[c, k] = feats[y == c].mean(0)
        for d in range(1, t + 1):  # recalc_similarity: true
            donors = [c for j in range(d, t + 1) for c in tasks[j]]
            for i in range(d):
                protos[tasks[i], d] = _by_hand(protos[tasks[i], i], protos[donors, i], protos[donors, d])
    assert torch.allclose(final["prototypes"], protos, atol=1e-5)
    own = {c: t for t, cs in enumerate(tasks) for c in cs}
    for t in range(3):
        xs, ys = zip(*loaders_of(cfg, bench, method, t).test)
        x, y = torch.cat(xs), torch.cat(ys)
        feats = [phi(x, k) for k in range(3)]
        logits = torch.stack([sum((1.0 if k == own[c] else 0.1 / 2) * F.cosine_similarity(feats[k], protos[c, k][None])
                                  for k in range(3)) for c in range(6)], dim=1)
        acc = (logits.argmax(1) == y).double().mean().item()
        assert metrics["acc_matrix"][t][2] == pytest.approx(acc, abs=1e-9)


def test_plain_cosine_over_the_concatenation():
    """reweight: false scores cos([phi_0, phi_1], [P_0, P_1]) on the whole concatenated vectors."""
    cfg = load_config(EASE_SMOKE, ["method.reweight=false"])
    _, _, method = build_run_parts(cfg)
    method.subspaces = 2
    method.learned[:] = True
    gen = torch.Generator().manual_seed(1)
    method.prototypes.copy_(torch.randn(method.prototypes.shape, generator=gen))
    feats = torch.randn(3, 2, 64, generator=gen)
    expected = F.normalize(feats.flatten(1), dim=-1) @ F.normalize(method.prototypes[:, :2].flatten(1), dim=-1).T
    assert torch.allclose(method.logits(feats), expected, atol=1e-6)


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="method.min_lr"):
        load_config(EASE_SMOKE, ["method.min_lr=1.0"])
    with pytest.raises(ConfigError, match="method.adapter_layers"):
        load_config(EASE_SMOKE, ["method.adapter_layers=[]"])
    with pytest.raises(ConfigError, match="method.alpha"):
        load_config(EASE_SMOKE, ["method.alpha=-1"])


def test_the_configured_softmax_axis_reaches_the_complement(monkeypatch):
    """``method.complement_softmax`` is what the method passes to complement after a task."""
    import norga.methods.ease as ease_module

    seen = []
    monkeypatch.setattr(ease_module, "complement", lambda *args: seen.append(args[3:]))
    cfg = load_config(EASE_SMOKE, ["method.epochs=1", "method.complement_softmax=old_classes",
                                   "method.recalc_similarity=false"])
    cfg, bench, method = build_run_parts(cfg)
    method.learn_task(0, loaders_of(cfg, bench, method, 0))
    assert seen == [(False, "old_classes")]
