"""Every loss term's inputs, pinned: each term recomputed from its definition with the method's own state.

For each training method a tiny run learns tasks 0 and 1 with the shared loop spied (``run_stage`` of the
method's module and of :mod:`norga.toolkit.stages`). The stages of task 1 are replayed on one fixed batch and
each term they optimise is compared with the same term written out here by hand from the method's stored
state: which statistics (instructed or uninstructed; which classes), which prompts (the ensembled p_t or the
raw e_t; the task's own E-prompt or another; the components in use), which features (prompted or frozen;
augmented training images or not) and which classes the cross-entropy runs over. Each test also checks that
the plausible other input gives another number, so feeding a term the wrong one fails (tests/mutants.py plants
such bugs).
"""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import norga.toolkit.stages as stages_module
from conftest import build_run_parts, loaders_of
from norga.config import load_config
from norga.models.prompt_inputs import PromptInput
from conftest import SMOKE

TINY = ["data.num_tasks=3"]
CLOSE = dict(rtol=1e-5, atol=1e-6)


@contextmanager
def spied_stages(*modules):
    """Record every ``run_stage`` call of ``modules`` (stage, batches, forward, terms) and run it as usual."""
    calls, originals = [], {m: m.run_stage for m in modules}

    def spy_for(original):
        def spy(stage, batches, forward, terms):
            calls.append(SimpleNamespace(stage=stage, batches=batches, forward=forward, terms=terms))
            return original(stage, batches=batches, forward=forward, terms=terms)
        return spy

    for module, original in originals.items():
        module.run_stage = spy_for(original)
    try:
        yield calls
    finally:
        for module, original in originals.items():
            module.run_stage = original


def trained(method_overrides, module):
    """(cfg, learner, calls, loaders of task 1, a fixed training batch of task 1) after tasks 0 and 1."""
    cfg, bench, learner = build_run_parts(load_config(SMOKE, TINY + method_overrides))
    with spied_stages(module, stages_module) as calls:
        for task in range(2):
            torch.manual_seed(task)
            loaders = loaders_of(cfg, bench, learner, task)
            learner.learn_task(task, loaders)
    x, y = next(iter(loaders.train))
    return SimpleNamespace(cfg=cfg, learner=learner, calls=calls, loaders=loaders, x=x, y=y)


def stage_of(run, name: str, task: int = 1):
    found = [c for c in run.calls if c.stage.name == name and c.stage.task == task]
    assert len(found) == 1, f"expected one {name!r} stage of task {task}, got {[c.stage.name for c in run.calls]}"
    return found[0]


def ce_over(logits, labels, classes):
    """Cross-entropy with every logit outside ``classes`` at -inf (written out, no label smoothing)."""
    allowed = torch.zeros(logits.shape[1], dtype=torch.bool)
    allowed[list(classes)] = True
    return F.cross_entropy(logits.masked_fill(~allowed, float("-inf")), labels)


def differs(a, b) -> bool:
    return not torch.allclose(torch.as_tensor(a), torch.as_tensor(b), **CLOSE)


# ---- NoRGa / HiDe-Prompt ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def norga_run():
    import norga.methods.hideprompt as module

    fast = ["method.tii.epochs=2", "method.tii.align_epochs=1", "method.wtp.epochs=1", "method.tap.epochs=1",
            "method.diagnostics=false", "method.wtp.reg=0.5"]
    return trained(fast, module)


def test_wtp_terms_use_the_ensembled_prompt_on_augmented_images_and_the_instructed_old_means(norga_run):
    run, learner, w = norga_run, norga_run.learner, norga_run.cfg.method.wtp
    wtp = stage_of(run, "wtp")
    assert wtp.batches(0) is run.loaders.train  # the augmented training images
    out = wtp.forward((run.x, run.y))
    e = learner.pool.prompts
    ensembled = (1 - w.momentum) * e[1].detach() + w.momentum * e[0].detach()  # p_1 = (1 - m) e_1 + m mean(e_0)
    with torch.no_grad():
        feats = learner.model(run.x, ensembled)
        raw = learner.model(run.x, e[1].detach())
        frozen = learner.model(run.x)
    assert torch.allclose(out["features"], feats, **CLOSE) and differs(raw, feats) and differs(frozen, feats)
    task1, task0 = learner.task_classes[1], learner.task_classes[0]
    ce = ce_over(learner.head(feats), run.y, task1)
    assert torch.allclose(wtp.terms["ce"](out), ce, **CLOSE)
    assert differs(ce_over(learner.head(feats), run.y, task0 + task1), ce)  # not over the seen classes

    def regulariser(means):  # the authors' form: every row of M = [old class means; features] is its own positive
        rows = torch.cat([means, feats])
        return w.reg * F.cross_entropy(rows @ rows.T / w.temperature, torch.arange(len(rows)))

    instructed = torch.stack([learner.instructed.stats[c]["mean"] for c in task0]).float()
    uninstructed = torch.stack([learner.uninstructed.stats[c]["mean"] for c in task0]).float()
    reg = regulariser(instructed)
    assert torch.allclose(wtp.terms["reg"](out), reg, **CLOSE)
    assert differs(regulariser(uninstructed), reg)


def test_tii_learns_frozen_unaugmented_features_of_the_task_and_aligns_on_uninstructed_statistics(norga_run):
    run, learner = norga_run, norga_run.learner
    tii = stage_of(run, "tii")  # smoke: cache_features, i.e. frozen features of un-augmented images
    feats, labels = next(iter(tii.batches(0)))
    plain_x = torch.cat([b[0] for b in run.loaders.train_plain])
    with torch.no_grad():
        frozen, augmented = learner.model(plain_x), learner.model(run.x)
    nearest = lambda rows, pool: torch.cdist(rows, pool, compute_mode="donot_use_mm_for_euclid_dist").min(dim=1).values  # noqa: E731
    assert nearest(feats, frozen).max() < 1e-4  # every training row is a frozen un-augmented feature
    assert nearest(augmented, frozen).max() > 1e-3  # (augmented images' features are not)
    assert set(labels.tolist()) <= set(learner.task_classes[1])
    out = tii.forward((feats, labels))
    assert torch.allclose(tii.terms["ce"](out), ce_over(learner.tii_head(feats), labels, learner.task_classes[1]),
                          **CLOSE)
    seen = learner.seen_classes(1)
    for name, store in (("tii_align", learner.uninstructed), ("tap", learner.instructed)):
        align = stage_of(run, name)
        pseudo, pseudo_labels = next(iter(align.batches(0)))
        assert set(pseudo_labels.tolist()) <= set(seen)
        head = learner.tii_head if name == "tii_align" else learner.head
        out = align.forward((pseudo, pseudo_labels))
        assert torch.allclose(align.terms["ce"](out), ce_over(head(pseudo), pseudo_labels, seen), **CLOSE)
        # the pseudo-features come from that store: nearer its class means than the other store's
        means = {c: store.stats[c]["mean"] for c in seen}
        other = learner.instructed if store is learner.uninstructed else learner.uninstructed
        own = torch.stack([means[int(c)] for c in pseudo_labels]).float()
        alt = torch.stack([other.stats[int(c)]["mean"] for c in pseudo_labels]).float()
        assert (pseudo - own).norm(dim=1).mean() < (pseudo - alt).norm(dim=1).mean()


# ---- the baselines ---------------------------------------------------------------------------------------------
TINY_DATA = ["data.options={num_classes: 30, train_per_class: 12, test_per_class: 4}"]


@pytest.fixture(scope="module")
def l2p_stages():
    import norga.methods.l2p as module

    return trained(TINY_DATA + ["method={name: l2p, pool_size: 4, prompt_length: 2, top_k: 2, epochs: 1, lr: 0.01, "
                                "batch_size: 32, pull_coeff: 0.5}"], module)


def test_l2p_terms_use_each_samples_top_k_prompts_by_its_frozen_query_and_pull_only_those_keys(l2p_stages):
    run, learner, c = l2p_stages, l2p_stages.learner, l2p_stages.cfg.method
    stage = stage_of(run, "l2p")
    assert stage.batches(0) is run.loaders.train
    out = stage.forward((run.x, run.y))
    with torch.no_grad():
        query = learner.model(run.x)  # the frozen class token, no prompts
        sim = F.normalize(query, dim=1) @ F.normalize(learner.keys, dim=1).T
        chosen = sim.topk(c.top_k, dim=1).indices
        tokens = learner.prompts[chosen].flatten(1, 2) + learner.prompt_pos
        feats = learner.model(run.x, PromptInput(tokens=tokens, pool="prompt_mean"))
    assert torch.equal(out["chosen"].sort(1).values, chosen.sort(1).values)
    ce = ce_over(learner.head(feats), run.y, learner.task_classes[1])
    assert torch.allclose(stage.terms["ce"](out), ce, **CLOSE)
    pull = -c.pull_coeff * sim.gather(1, chosen).sum() / len(run.x)
    assert torch.allclose(stage.terms["pull"](out), pull, **CLOSE)
    assert differs(-c.pull_coeff * sim.sum() / len(run.x), pull)  # every key pulled instead of the chosen ones
    assert differs(-c.pull_coeff * sim.gather(1, chosen[:, :1]).sum() / len(run.x), pull)


@pytest.fixture(scope="module")
def dual_stages():
    import norga.methods.dualprompt as module

    return trained(TINY_DATA + ["method={name: dualprompt, g_prompt_layers: [0], e_prompt_layers: [1], "
                                "g_prompt_length: 2, e_prompt_length: 3, gate: {name: norga, activation: tanh}, "
                                "epochs: 1, lr: 0.05, batch_size: 32, pull_coeff: 0.5}"], module)


def test_dualprompt_trains_the_tasks_own_e_prompt_and_pulls_its_own_key_to_the_frozen_query(dual_stages):
    run, learner, c = dual_stages, dual_stages.learner, dual_stages.cfg.method
    stage = stage_of(run, "dualprompt")
    assert stage.batches(0) is run.loaders.train
    out = stage.forward((run.x, run.y))
    with torch.no_grad():
        query = learner.model(run.x)
        own = learner.head(learner.model(run.x, learner.prompts(learner.e_prompts[1][None])))
        other = learner.head(learner.model(run.x, learner.prompts(learner.e_prompts[0][None])))
    ce = ce_over(own, run.y, learner.task_classes[1])
    assert torch.allclose(stage.terms["ce"](out), ce, **CLOSE)
    assert differs(ce_over(other, run.y, learner.task_classes[1]), ce)  # not another task's E-prompt
    cos = lambda key: (F.normalize(query, dim=1) @ F.normalize(key, dim=0))  # noqa: E731
    pull = -c.pull_coeff * cos(learner.keys[1]).mean()
    assert torch.allclose(stage.terms["pull"](out), pull, **CLOSE)
    assert differs(-c.pull_coeff * cos(learner.keys[0]).mean(), pull)


@pytest.fixture(scope="module")
def coda_stages():
    import norga.methods.coda as module

    return trained(TINY_DATA + ["method={name: coda, prompt_layers: [0, 1], pool_size: 6, prompt_length: 4, "
                                "ortho_mu: 0.1, epochs: 1, lr: 0.01, batch_size: 32}"], module)


def test_coda_weighs_every_component_in_use_and_penalises_all_of_them(coda_stages):
    run, learner, c = coda_stages, coda_stages.learner, coda_stages.cfg.method
    stage = stage_of(run, "coda")
    assert stage.batches(0) is run.loaders.train
    out = stage.forward((run.x, run.y))
    end, start = 2 * learner.per_task, learner.per_task
    pools = {name: pool[:, :end] for name, pool in learner.pools.items()}  # task 0's and task 1's rows
    with torch.no_grad():
        query = learner.model(run.x)
        feats = learner.model(run.x, learner.prompts(query, pools["components"], pools["keys"], pools["attention"]))
        new_only = {name: pool[:, start:end] for name, pool in learner.pools.items()}
        feats_new = learner.model(run.x, learner.prompts(query, new_only["components"], new_only["keys"],
                                                         new_only["attention"]))
    ce = ce_over(learner.head(feats), run.y, learner.task_classes[1])
    assert torch.allclose(stage.terms["ce"](out), ce, **CLOSE)
    assert differs(ce_over(learner.head(feats_new), run.y, learner.task_classes[1]), ce)

    def o(rows):  # mean((X X^T - I)^2), written out
        gram = rows @ rows.T
        return ((gram - torch.eye(len(rows))) ** 2).mean()

    def penalty(p):
        return c.ortho_mu * sum(o(p["keys"][j]) + o(p["attention"][j]) + o(p["components"][j].flatten(1))
                                for j in range(len(learner.layers)))

    assert torch.allclose(stage.terms["ortho"](out), penalty(pools), **CLOSE)
    assert differs(penalty(new_only), penalty(pools))


@pytest.fixture(scope="module")
def sprompt_stages():
    import norga.methods.sprompt as module

    return trained(TINY_DATA + ["method={name: sprompt, prompt_length: 3, centroids_per_task: 2, epochs: 1, "
                                "lr: 0.05, batch_size: 32}"], module)


def test_sprompt_trains_the_tasks_own_prompt_over_the_tasks_classes(sprompt_stages):
    run, learner = sprompt_stages, sprompt_stages.learner
    stage = stage_of(run, "sprompt")
    assert stage.batches(0) is run.loaders.train
    out = stage.forward((run.x, run.y))
    with torch.no_grad():
        own = learner.head(learner.model(run.x, learner.tokens(learner.prompts[1])))
        other = learner.head(learner.model(run.x, learner.tokens(learner.prompts[0])))
    ce = ce_over(own, run.y, learner.task_classes[1])
    assert torch.allclose(stage.terms["ce"](out), ce, **CLOSE)
    assert differs(ce_over(other, run.y, learner.task_classes[1]), ce)


@pytest.fixture(scope="module")
def moe_stages():
    import norga.methods.moe_adapters as module

    return trained(TINY_DATA + ["method={name: mh_moe, heads: 2, experts: 3, top_k: 1, rank: 2, epochs: 1, "
                                "batch_size: 16, align_epochs: 1}"], module)


def test_moe_trains_adapted_features_over_the_task_then_aligns_the_head_on_all_seen_classes(moe_stages):
    run, learner = moe_stages, moe_stages.learner
    stage = stage_of(run, "moe")
    assert stage.batches(0) is run.loaders.train
    out = stage.forward((run.x, run.y))
    with torch.no_grad():
        logits = learner.head(learner.model(run.x).float())
    ce = ce_over(logits, run.y, learner.task_classes[1])
    assert torch.allclose(stage.terms["ce"](out), ce, **CLOSE)
    align = stage_of(run, "align")
    epoch = list(align.batches(0))
    pseudo, labels = epoch[0]
    seen = learner.seen_classes(1)
    assert set(torch.cat([b[1] for b in epoch]).tolist()) == set(seen)  # pseudo-features of every seen class
    assert torch.allclose(align.terms["ce"](align.forward((pseudo, labels))), ce_over(learner.head(pseudo), labels,
                                                                                       seen), **CLOSE)
