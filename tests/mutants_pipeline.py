"""The planted bugs of the HiDe-Prompt/NoRGa pipeline, its gates, the prompt baselines, the MoE methods and the
distributed and seeding code (run by tests/mutants.py, which explains how); the :class:`Mutant` record."""
from __future__ import annotations

from typing import NamedTuple, Tuple


class Mutant(NamedTuple):
    name: str
    path: str  # file relative to the repository
    old: str
    new: str
    tests: Tuple[str, ...]  # pytest node ids or files expected to fail


# tests/test_loss_terms.py: one test per method, each on its own tiny run (a mutant names the one test it must
# fail, not the whole file, whose run on the unmutated copy alone took about 60 s on a busy 2-core machine)
LOSS_TERMS = {key: "tests/test_loss_terms.py::test_" + test for key, test in (
    ("wtp", "wtp_terms_use_the_ensembled_prompt_on_augmented_images_and_the_instructed_old_means"),
    ("tii", "tii_learns_frozen_unaugmented_features_of_the_task_and_aligns_on_uninstructed_statistics"),
    ("l2p", "l2p_terms_use_each_samples_top_k_prompts_by_its_frozen_query_and_pull_only_those_keys"),
    ("dualprompt", "dualprompt_trains_the_tasks_own_e_prompt_and_pulls_its_own_key_to_the_frozen_query"),
    ("coda", "coda_weighs_every_component_in_use_and_penalises_all_of_them"),
    ("sprompt", "sprompt_trains_the_tasks_own_prompt_over_the_tasks_classes"),
    ("moe", "moe_trains_adapted_features_over_the_task_then_aligns_the_head_on_all_seen_classes"))}

PIPELINE_MUTANTS = (
    Mutant("tap_uninstructed", "norga/methods/hide_stages.py", "align_head(self.head, self.instructed,",
           "align_head(self.head, self.uninstructed,", ("tests/test_wiring.py",)),
    Mutant("stats_from_augmented_images", "norga/methods/hideprompt.py",
           "frozen, labels = self.frozen_pass(self.model, loaders.train_plain)",
           "frozen, labels = self.frozen_pass(self.model, loaders.train)",
           ("tests/test_wiring.py",)),
    Mutant("head_lr_scale_ignored", "norga/methods/hideprompt.py", '"lr": lr * w.head_lr_scale}', '"lr": lr}',
           ("tests/test_wiring.py",)),
    Mutant("wtp_lr_scaling_ignored", "norga/methods/hideprompt.py", "lr = self.lr_scaled(w.lr, w.batch_size)",
           "lr = w.lr",
           ("tests/test_wiring.py",)),
    Mutant("reg_sign", "norga/methods/hideprompt.py", "return w.reg * regulariser(", "return -w.reg * regulariser(",
           ("tests/test_wiring.py",)),
    Mutant("cil_uses_true_task_prompt", "norga/methods/hideprompt.py",
           "feats = prompted_features(self.model, x, index, tasks, self.task_prompts, cache, task, n)",
           "feats = prompted_features(self.model, x, index, torch.full_like(tasks, task), self.task_prompts, cache, "
           "task, n)",
           ("tests/test_wiring.py",)),
    Mutant("gates_train_after_task_0", "norga/gates/modules.py", "        return task == 0\n",
           "        return True\n",
           ("tests/test_pipeline.py::test_gates_train_on_task_one_then_freeze_and_old_prompts_never_change",)),
    Mutant("no_prompt_writeback", "norga/methods/hideprompt.py", "if w.prompt_writeback:", "if False:",
           ("tests/test_fidelity_pipeline.py",)),
    Mutant("tap_after_task_0", "norga/methods/hide_stages.py", "if task > 0 or c.tap.after_first_task:", "if True:",
           ("tests/test_fidelity_pipeline.py",)),
    # every loss term's inputs (#31): tests/test_loss_terms.py recomputes each term by hand
    Mutant("wtp_raw_prompt", "norga/methods/hideprompt.py", "feats = model(x.to(self.device), pool.ensembled(task, "
           "w.momentum))", "feats = model(x.to(self.device), pool.prompts[task])", (LOSS_TERMS["wtp"],)),
    Mutant("reg_on_uninstructed_means", "norga/methods/hideprompt.py", "prototypes = self.instructed.means(old)",
           "prototypes = self.uninstructed.means(old)", (LOSS_TERMS["wtp"],)),
    Mutant("wtp_ce_over_seen_classes", "norga/methods/hideprompt.py",
           "cross_entropy_term(self.task_mask(task), w.label_smoothing)",
           "cross_entropy_term(self.seen_mask(task), w.label_smoothing)", (LOSS_TERMS["wtp"],)),
    Mutant("tii_ce_over_seen_classes", "norga/methods/hide_stages.py",
           "fit_on_features(self.tii_head, frozen, labels, self.task_mask(task)",
           "fit_on_features(self.tii_head, frozen, labels, self.seen_mask(task)", (LOSS_TERMS["tii"],)),
    Mutant("l2p_pull_on_the_first_chosen_key", "norga/methods/l2p.py", 'pull_loss(out["similarity"], out["chosen"])',
           'pull_loss(out["similarity"], out["chosen"][:, :1])', (LOSS_TERMS["l2p"],)),
    Mutant("dualprompt_pull_on_the_first_tasks_key", "norga/methods/dualprompt.py",
           "F.cosine_similarity(query, key[None])", "F.cosine_similarity(query, self.keys[0][None])",
           (LOSS_TERMS["dualprompt"],)),
    Mutant("coda_ortho_on_new_rows_only", "norga/methods/coda.py", 'out["ortho"] = c.ortho_mu * self.penalty(*pools)',
           'out["ortho"] = c.ortho_mu * self.penalty(*new.values())', (LOSS_TERMS["coda"],)),
    Mutant("sprompt_trains_the_previous_prompt", "norga/methods/sprompt.py",
           "feats = model(x.to(self.device), self.tokens(prompt))",
           "feats = model(x.to(self.device), self.tokens(self.prompts[max(task - 1, 0)]))",
           (LOSS_TERMS["sprompt"],)),
    Mutant("moe_aligns_on_the_tasks_classes_only", "norga/methods/moe_adapters.py",
           "align_head(self.head, self.stats, self.seen_classes(task),",
           "align_head(self.head, self.stats, self.task_classes[task],", (LOSS_TERMS["moe"],)),
    # the baselines (#16)
    Mutant("l2p_pull_sign", "norga/methods/l2p.py", "lambda out: -c.pull_coeff * pull_loss(",
           "lambda out: c.pull_coeff * pull_loss(", ("tests/test_l2p.py",)),
    Mutant("sprompt_l2_for_l1", "norga/methods/sprompt.py", 'diff.abs().sum(-1) if distance == "l1"',
           'diff.pow(2).sum(-1) if distance == "l1"', ("tests/test_sprompt.py",)),
    Mutant("dualprompt_pull_sign", "norga/methods/dualprompt.py", '"pull": lambda out: -c.pull_coeff',
           '"pull": lambda out: c.pull_coeff', ("tests/test_dualprompt.py",)),
    Mutant("dualprompt_batch_shares_first_prompt", "norga/methods/dualprompt.py",
           "self.prompts(self.e_prompts[tasks])", "self.prompts(self.e_prompts[tasks[:1]])",
           ("tests/test_dualprompt.py",)),
    Mutant("dualprompt_keys_as_values", "norga/methods/dualprompt.py", "prompt[:, j, 1].transpose(1, 2)",
           "prompt[:, j, 0].transpose(1, 2)", ("tests/test_dualprompt.py",)),
    Mutant("coda_heads_split_wrongly", "norga/methods/coda.py",
           "prompt.view(B, 2, half, heads, head_dim).transpose(2, 3)", "prompt.view(B, 2, heads, half, head_dim)",
           ("tests/test_coda.py",)),
    Mutant("coda_new_rows_not_orthogonal_to_old", "norga/methods/coda.py", "v = v - (v @ basis) @ basis.T",
           "v = v", ("tests/test_coda.py",)),
    Mutant("moe_softmax_over_all_experts", "norga/models/moe_adapters.py",
           "return chosen, values.softmax(dim=-1)", "return chosen, logits.softmax(dim=-1).gather(-1, chosen)",
           ("tests/test_moe_adapters.py",)),
    Mutant("moe_slices_share_one_router", "norga/models/moe_adapters.py",
           'torch.einsum("nhs,hks->nhk", slices, self.router)',
           'torch.einsum("nhs,ks->nhk", slices, self.router[0])', ("tests/test_moe_adapters.py",)),
    Mutant("n_eff_without_square", "norga/toolkit/routing.py", "return 1.0 / (p ** 2).sum(1)",
           "return 1.0 / p.sum(1)", ("tests/test_moe_adapters.py",)),
    Mutant("ddp_gradients_unweighted", "norga/toolkit/distributed.py",
           "(p.grad.detach().float().flatten() * samples)", "p.grad.detach().float().flatten()",
           ("tests/test_distributed.py",)),
    Mutant("ddp_statistics_from_own_shard", "norga/toolkit/stages.py",
           "    if shard is None:\n        return feats, labels", "    if True:\n        return feats, labels",
           ("tests/test_distributed.py",)),
    # random streams: a method's initial values drawn from task 0's data stream again (the L2P gap's cause)
    Mutant("l2p_init_from_the_data_stream", "norga/methods/l2p.py", "g = named_generator(cfg.seed, 0, INIT_STREAM)",
           "g = torch.Generator().manual_seed(cfg.seed * 1_000_003)", ("tests/test_seeding.py",)),
    Mutant("named_streams_without_the_top_bit", "norga/toolkit/seeding.py", "int(state) | NAMED_STREAM_BIT",
           "int(state) >> 23", ("tests/test_seeding.py",)),
)
