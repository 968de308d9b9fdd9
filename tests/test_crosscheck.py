"""What the cross-checks with the reference codes established, pinned without the reference code: the configs of
the NoRGa paper's baseline rows carry the values read from the authors' code, and the parsers that turn both sides'
runs into docs/crosscheck.md's tables read hand-made outputs correctly."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from crosscheck.harness import seed_runs
from bench.crosscheck_tables import METRICS, mean_lines
from crosscheck.harness.training import authors_log, coda_results, collect, norga_run
from crosscheck.harness.training import main as training_main
from norga.config import load_config

REPO = Path(__file__).resolve().parents[1]

# MoE_PromptCL e418337: configs/{cifar100,imr}_{l2p,dualprompt,sprompt_5e}.py + scripts/*_Sup21k_*.sh (batch 128)
AUTHORS = {
    "l2p": dict(name="l2p", pool_size=30, prompt_length=5, top_k=5, prompt_pos_embed="none", head_pool="token",
                pull_coeff=0.1, lr=0.005, batch_size=128, grad_clip=1.0),
    "dualprompt": dict(name="dualprompt", g_prompt_layers=[0, 1], g_prompt_length=5, e_prompt_layers=[2, 3, 4],
                       e_prompt_length=20, pull_coeff=1.0, e_prompt_init="previous", lr=0.005, batch_size=128),
    "sprompt": dict(name="dualprompt", g_prompt_length=0, e_prompt_layers=[0, 1, 2, 3, 4], e_prompt_length=20,
                    pull_coeff=1.0, e_prompt_init="previous", lr=0.005, batch_size=128),
}
EPOCHS = {("cifar100", "l2p"): 10, ("cifar100", "dualprompt"): 20, ("cifar100", "sprompt"): 20,
          ("imagenet_r", "l2p"): 50, ("imagenet_r", "dualprompt"): 50, ("imagenet_r", "sprompt"): 50}


@pytest.mark.parametrize("bench, method", sorted(EPOCHS))
def test_norga_paper_configs_carry_the_authors_values(bench, method):
    cfg = load_config(REPO / "configs" / f"{bench}_{method}_norga_paper.yaml")
    m = cfg.method
    for key, value in {**AUTHORS[method], "epochs": EPOCHS[bench, method]}.items():
        assert getattr(m, key) == value, (key, getattr(m, key), value)
    assert m.scale_lr_by_batch and m.head_init == "trunc_normal" and cfg.eval_mask_unseen is False
    assert cfg.model.preset == "sup21k" and cfg.data.transforms == "official" and cfg.seed == 42


def _authors_log(tmp_path, evaluations, finished=True):
    """A log in the authors' format: per task t, lines '* Acc@task a Acc@1 b' for tasks 0..t, then the average."""
    lines = ["Namespace(...)"]
    for t, accs in enumerate(evaluations):
        for task_acc, acc in accs:
            lines.append(f"* Acc@task {task_acc:.3f} Acc@1 {acc:.3f} Acc@5 99.000 loss 1.000")
        lines.append(f"[Average accuracy till task{t + 1}]\tAcc@task: 0.0000\tAcc@1: 0.0000")
    if finished:
        lines.append("Total training time: 0:01:00")
    path = tmp_path / "ref.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_authors_log_by_hand(tmp_path):
    log = _authors_log(tmp_path, [[(100, 60.0)], [(90, 40.0), (80, 70.0)], [(70, 30.0), (100, 50.0), (60, 90.0)]])
    row = authors_log(log)
    assert row["acc_matrix"] == [[0.6, 0.4, 0.3], [None, 0.7, 0.5], [None, None, 0.9]]
    assert math.isclose(row["FA"], (0.3 + 0.5 + 0.9) / 3)
    assert math.isclose(row["CA"], (0.6 + 0.55 + 1.7 / 3) / 3)
    assert math.isclose(row["FM"], (0.6 - 0.3 + 0.7 - 0.5) / 2)
    # CODA's forgetting: t=1: 0.6-0.4 = 0.2; t=2: ((0.4-0.3) + (0.7-0.5)) / 2 = 0.15; mean 0.175
    assert math.isclose(row["FGT_coda"], 0.175)
    assert math.isclose(row["task_acc"], (0.7 + 1.0 + 0.6) / 3)
    assert authors_log(log, top_1=False)["task_acc"] is None


def test_an_unfinished_or_malformed_authors_log_is_refused(tmp_path):
    with pytest.raises(ValueError, match="did not finish"):
        authors_log(_authors_log(tmp_path, [[(100, 60.0)]], finished=False))
    with pytest.raises(ValueError, match="expected 2"):
        authors_log(_authors_log(tmp_path, [[(100, 60.0)], [(90, 40.0)]]))


def test_coda_results_by_hand(tmp_path):
    (tmp_path / "results-acc").mkdir()
    # history[task][after][seed] in percent; entries for after < task are zeros in the file
    history = [[[50, 60], [40, 30]], [[0, 0], [80, 90]]]
    (tmp_path / "results-acc" / "pt.yaml").write_text(json.dumps({"history": history}))
    seeds = coda_results(tmp_path)
    assert [s["acc_matrix"] for s in seeds] == [[[0.5, 0.4], [None, 0.8]], [[0.6, 0.3], [None, 0.9]]]
    assert math.isclose(seeds[1]["FA"], 0.6) and math.isclose(seeds[1]["FGT_coda"], 0.3)


def test_collect_names_every_missing_or_unfinished_run(tmp_path):
    run = tmp_path / "runs" / "norga_l2p_s42"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"completed_tasks": 1, "num_tasks": 5, "acc_matrix": [[0.5]]}))
    with pytest.raises(ValueError, match="1 of 5 tasks"):
        norga_run(run)
    rows, missing = collect(tmp_path)
    assert rows == [] and any("norga_l2p_s42" in m and "1 of 5" in m for m in missing)
    assert any("ref_coda" in m for m in missing)


@pytest.mark.parametrize("bench, recipe", [("cifar100", "coda_cifar"), ("imagenet_r", "coda_imagenet")])
def test_coda_official_configs_follow_the_official_code(bench, recipe):
    """GT-RIPL/CODA-Prompt 6417d4f: timm 0.4.12's vit_base_patch16_224 (augreg in21k, fine-tuned in1k) fed
    un-normalised images; the method values are those of cifar100_coda.yaml / imagenet_r_coda.yaml."""
    official = load_config(REPO / "configs" / f"{bench}_coda_official.yaml")
    ours = load_config(REPO / "configs" / f"{bench}_coda.yaml")
    assert official.data.transforms == recipe and official.model.preset is None
    assert official.model.name == "vit_base_patch16_224.augreg_in21k_ft_in1k"
    assert official.method == ours.method and official.method.lr == 0.001 and official.method.pool_size == 100
    assert official.method.epochs == (20 if bench == "cifar100" else 50)


def test_collect_names_unfinished_coda_repeats(tmp_path):
    (tmp_path / "runs" / "ref_coda" / "results-acc").mkdir(parents=True)
    history = [[[50], [40]], [[0], [80]]]  # one repeat of the three written so far
    (tmp_path / "runs" / "ref_coda" / "results-acc" / "pt.yaml").write_text(json.dumps({"history": history}))
    rows, missing = collect(tmp_path)
    assert [r["seed"] for r in rows if r["method"] == "coda"] == [0]
    assert any("1 of 3 repeats finished" in m for m in missing)


def _finished_norga_run(root, name, acc):
    run = root / "runs" / name
    run.mkdir(parents=True)
    matrix = [[acc if i <= j else None for j in range(5)] for i in range(5)]
    (run / "metrics.json").write_text(json.dumps({"completed_tasks": 5, "num_tasks": 5, "acc_matrix": matrix}))


def test_recollecting_one_side_keeps_the_others_and_relabels_the_old_rows(tmp_path):
    results = tmp_path / "results.json"
    old = [{"method": "l2p", "side": s, "seed": 42, **dict.fromkeys(METRICS), "FA": fa} for s, fa in
           [("reference_fixed", 0.15), ("norga", 0.20), ("simplecil", 0.21)]]
    results.write_text(json.dumps({"rows": old, "missing": []}))
    _finished_norga_run(tmp_path, "norga_l2p_s42", 0.16)
    training_main(["--collect", str(tmp_path), "--results", str(results), "--sides", "norga",
                   "--keep-as", "norga_shared_stream"])
    rows = {(r["method"], r["side"], r["seed"]): r["FA"] for r in json.loads(results.read_text())["rows"]}
    assert rows[("l2p", "reference_fixed", 42)] == 0.15 and rows[("l2p", "simplecil", 42)] == 0.21
    assert rows[("l2p", "norga_shared_stream", 42)] == 0.20 and math.isclose(rows[("l2p", "norga", 42)], 0.16)
    assert not any(side == "reference_fixed" and m == "coda" for m, side, _ in rows)  # reference side not parsed
    table = "\n".join(mean_lines(json.loads(results.read_text())["rows"]))
    assert "| l2p | 15.0 (n=1) | 16.0 (n=1) | +1.0 | 20.0 (n=1), +5.0 |" in table
    with pytest.raises(SystemExit):  # the old rows may not be kept under a compared side's name
        training_main(["--collect", str(tmp_path), "--results", str(results), "--sides", "norga",
                       "--keep-as", "reference_fixed"])


def test_seed_runs_scores_both_sides_in_the_same_units(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(seed_runs, "TASKS", 2)
    rows = {1993: [[60.0], [40.0, 50.0]], 1994: [[70.0], [30.0, 40.0]]}  # pilot_runs_reference: percent
    for seed, after in rows.items():
        (tmp_path / f"ref_ease_s{seed}.json").write_text(json.dumps({"matrix": after}))
        run = tmp_path / f"norga_ease_s{seed}"
        run.mkdir()
        s = [[after[0][0] / 100 + 0.02, after[1][0] / 100 + 0.02], [None, after[1][1] / 100]]  # task 0 two points up
        (run / "metrics.json").write_text(json.dumps({"completed_tasks": 2, "acc_matrix": s}))
    seed_runs.main(["ease", str(tmp_path), "--seeds", "1993", "1994", "1995"])
    out = capsys.readouterr().out
    assert "| reference | 1993 | 45.0 |" in out and "| norga | 1993 | 46.0 |" in out
    assert "mean FA reference (n=2): 40.0" in out
    assert "over seeds [1993, 1994]: +1.0 [+1.0, +1.0]" in out
    assert "ref_ease_s1995.json (missing)" in out and "norga_ease_s1995/metrics.json (missing)" in out


def test_seed_runs_leaves_out_unfinished_runs_and_refuses_short_reference_files(tmp_path, capsys):
    run = tmp_path / "norga_mos_s40"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"completed_tasks": 3, "acc_matrix": [[0.5]]}))
    assert seed_runs.scores("mos", tmp_path, [40]) == {"reference": {}, "norga": {}}
    printed = capsys.readouterr().out
    assert "norga_mos_s40/metrics.json (3 of 5 tasks)" in printed and "ref_mos_s40.json (missing)" in printed
    (tmp_path / "ref_mos_s40.json").write_text(json.dumps({"matrix": [[0.5]]}))
    with pytest.raises(ValueError, match="1 of 5 tasks"):
        seed_runs.scores("mos", tmp_path, [40])


def _adapters(value: float):
    from torch import nn

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.down_proj, self.up_proj = nn.Linear(4, 2), nn.Linear(2, 4)
            for p in self.parameters():
                nn.init.constant_(p, value)

    return [Pair(), Pair()]


def test_tuna_init_exchange_writes_then_replaces_the_first_task_tensors(tmp_path):
    """The swap of the TUNA finding: a side's drawn adapters (its layer names) and head are written in norga's
    naming, and another side's file replaces them; a file of the wrong shape is one error naming both shapes."""
    import torch

    from crosscheck.tuna.first_task_init import exchange_first_task_init

    names = {"down": "down_proj", "up": "up_proj"}
    mine, head = _adapters(1.0), torch.full((3, 4), 1.0)
    exchange_first_task_init(names, mine, head, None, tmp_path / "mine.pt")
    saved = torch.load(tmp_path / "mine.pt", weights_only=True)
    assert sorted(saved["adapter"][1]) == ["down.bias", "down.weight", "up.bias", "up.weight"]
    theirs, their_head = _adapters(2.0), torch.full((3, 4), 2.0)
    exchange_first_task_init(names, theirs, their_head, tmp_path / "mine.pt", None)
    assert all(bool((p == 1.0).all()) for a in theirs for p in a.parameters()) and bool((their_head == 1.0).all())
    with pytest.raises(SystemExit, match=r"head \(3, 4\), this run has 2 and \(5, 4\)"):
        exchange_first_task_init(names, _adapters(0.0), torch.zeros(5, 4), tmp_path / "mine.pt", None)


def test_tuna_swap_needs_a_norga_command_and_a_file():
    from crosscheck.tuna import swap_norga as tuna_swap_norga

    with pytest.raises(SystemExit, match="after '--'"):
        tuna_swap_norga.main(["--init-in", "x.pt"])
    with pytest.raises(SystemExit, match="--init-out FILE, --init-in FILE or both"):
        tuna_swap_norga.main(["--", "train"])


def test_reference_runs_take_the_values_of_their_crosscheck_configs():
    """The whole-run reference scripts restate their config's values in the reference's names (they build its
    Learner, which reads a dict); each must equal what norga resolves from configs/crosscheck/<method>.yaml, and the
    reference's batch_size x 5 alignment samples what norga's config samples per class."""
    from crosscheck.mos import reference_run as mos_reference_run
    from crosscheck.tuna import reference_run as tuna_reference_run

    mos, ref = load_config(REPO / "configs" / "crosscheck" / "mos.yaml").method, mos_reference_run.ARGS
    assert (ref["init_lr"], ref["batch_size"], ref["weight_decay"], ref["min_lr"], ref["tuned_epoch"]) == (
        mos.lr, mos.batch_size, mos.weight_decay, mos.min_lr, mos.epochs)
    assert (ref["reg"], ref["adapter_momentum"], ref["ensemble"], ref["crct_epochs"], ref["ca_lr"]) == (
        mos.reg, mos.adapter_momentum, mos.ensemble, mos.ca_epochs, mos.ca_lr)
    assert ref["ca_storage_efficient_method"] == mos.ca_statistics and 5 * ref["batch_size"] == mos.ca_samples_per_class
    tuna, ref = load_config(REPO / "configs" / "crosscheck" / "tuna.yaml").method, tuna_reference_run.ARGS
    assert (ref["init_lr"], ref["batch_size"], ref["weight_decay"], ref["min_lr"], ref["tuned_epoch"]) == (
        tuna.lr, tuna.batch_size, tuna.weight_decay, tuna.min_lr, tuna.epochs)
    assert (ref["crct_epochs"], ref["ca_lr"], ref["scale"], ref["m"]) == (tuna.ca_epochs, tuna.ca_lr, tuna.scale,
                                                                          tuna.margin)
    assert ref["use_orth"] == (tuna.orth_weight > 0) and ref["decay"] == (tuna.ca_mean_decay != "none")
    assert ref["ca_storage_efficient_method"] == tuna.stats and 5 * ref["batch_size"] == tuna.ca_per_class


def test_hidelora_reference_run_takes_the_values_of_its_crosscheck_config():
    """Both of the reference's runs (the continual-LoRA TII model, then HiDe-LoRA) restate configs/crosscheck/
    hidelora.yaml in the reference's argument names."""
    from crosscheck.hidelora import reference_run as run

    c = load_config(REPO / "configs" / "crosscheck" / "hidelora.yaml").method
    tii, lora, w = run.CONTINUAL, run.HIDELORA, c.wtp
    assert c.tii_model == "continual_lora" and c.scale_lr_by_batch and tii["unscale_lr"] and lora["unscale_lr"]
    assert (tii["epochs"], tii["batch_size"], tii["lr"], tii["slow_lr"], tii["lora_rank"], tii["clip_grad"]) == (
        c.continual_lora.epochs, w.batch_size, c.continual_lora.lr, c.continual_lora.slow_lr, c.continual_lora.rank,
        c.continual_lora.grad_clip)
    assert tii["continual_type"] == ("slow_learner" if c.continual_lora.slow_first_task else "first_sl")
    assert (tii["crct_epochs"], tii["ca_lr"], 5 * tii["batch_size"]) == (
        c.continual_lora.align_epochs, c.continual_lora.align_lr, c.continual_lora.samples_per_class)
    assert (lora["epochs"], lora["batch_size"], lora["lr"], lora["lora_rank"], lora["reg"], lora["lora_momentum"]) == (
        w.epochs, w.batch_size, w.lr, c.rank, w.reg, w.momentum)
    assert (lora["sched"], lora["warmup_epochs"], lora["warmup_lr"], lora["min_lr"], lora["clip_grad"]) == (
        w.schedule, w.warmup_epochs, w.warmup_lr, w.min_lr, w.grad_clip)
    assert (lora["crct_epochs"], lora["ca_lr"], 5 * lora["batch_size"], lora["n_centroids"]) == (
        c.tap.epochs, c.tap.lr, c.tap.samples_per_class, c.stats.n_centroids)
    assert lora["ca_storage_efficient_method"].replace("-", "_") == c.stats.kind
