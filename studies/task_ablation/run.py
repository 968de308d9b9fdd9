"""Why do the prompts lose to the frozen backbone at small scale? A task-level ablation (issue #33), pre-registered.

    python -m studies.task_ablation.run --regime evidence [--levels base lr_x10 ...] [--seeds 1 2 3 4 5] [--quick]
    python -m studies.task_ablation.run --report          # tables from the committed rows only
    python -m studies.task_ablation.run --check           # exit 1 when the committed report is not the rows'
    python -m studies.task_ablation.run --merge runs/lanes/a runs/lanes/b   # rows of parallel processes (own --results)
    python -m studies.task_ablation.run --regime evidence --combination      # the rule's pick, fresh seeds 6-10

A **cell** is (regime, level, seed): the regime's ``norga_tanh`` arm with the level's overrides learns tasks 0 and
1 (the full HiDe-Prompt pipeline: TII, WTP, TAP; task 1 starts from task 0's prompt and head) and the method's
diagnostics (``norga.methods.hideprompt_diagnostics``) give, per task,

    delta = TIL(psi on prompted features, right after WTP) - TIL(linear probe on frozen features)

both on the task's test images with logits over its classes; the probe is trained on the task's un-augmented
training images with WTP's epochs, lr and batch. Rows also carry WTP's CE and regulariser per epoch (curves,
drawn per regime and level into ``<results>.png`` by ``studies/task_ablation/figure.py``; first and last epoch also as
numbers), the feature change of the trained prompt against a random prompt of the same norm, the prompt change
and the minutes. Rows are appended to ``studies/task_ablation/task_ablation.json`` as cells finish; a cell already
there is skipped (resumable). Two processes never write one results file: side by side, each gets its own ``--results``
stem and ``--merge`` adds their rows afterwards (``bench/row_merge.py``; a cell two lanes disagree on is refused).

PRE-REGISTERED (written 2026-11-25, before any cell ran; the grid, the readout and the rule are not changed after
seeing results; an added level or regime is marked as added later)

* Regimes: ``evidence`` (mixed domains, DINOv2 ViT-S/14 56 px), ``cifar100_first`` (Split CIFAR-100, DINOv2
  ViT-S/14 84 px) and ``weak_cifar`` (CIFAR-100 classes 0-49 in 5 tasks of 10 on the small ViT of
  ``studies/weak_backbone/build.py``, pretrained on classes 50-99 only). Seeds 1-5 in every regime.
* Levels, one factor at a time from the regime's ``norga_tanh`` arm (``base``): ``studies.task_ablation.grid.LEVELS``
  (their factors: ``FACTORS`` there).
* Statistic: per seed, the mean delta over tasks 0 and 1; per (regime, level) its mean and 95% t interval over
  the seeds, and the paired difference level - base (by seed) with its 95% t interval.
* Decision rule: a level *matters* in a regime when the interval of (level - base) excludes 0. The
  *combination*: per factor, the level with the largest mean (level - base) among the levels resolved above 0 in
  at least 2 of the 3 regimes (none: the base value); it runs once on fresh seeds 6-10 in all three regimes and
  *wins* in a regime when its delta interval lies above 0. Only if it wins in at least 2 regimes is it shipped as
  ``configs/recipes/small_data.yaml`` and run on the full evidence benchmark (5 seeds, paired with the arms).
  The statistics and the rule as code: ``studies/task_ablation/rule.py``.

``--combination`` reads the rule's pick from the merged rows (``--grid``, default the committed
``studies/task_ablation/task_ablation.json``; one clear error while a cell of the grid is missing) and runs it as the
level ``combination`` on fresh seeds; its rows name the levels it combined. Rows written by this code (since commit
c984e79, 2026-11-27) also name the backbone (``backbone``: the first 16 hex digits of the sha256 of
``model.checkpoint``, as in a run's metrics.json); a cell is not resumed onto rows of the same cell that name
another backbone.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import List, Optional, Sequence

from studies.task_ablation.figure import write_curves
from studies.task_ablation.grid import COMBINATION, LEVELS, combination_levels, combined_overrides
from studies.task_ablation.report import write_report
from studies.task_ablation.rule import FRESH_SEEDS, GRID_SEEDS, TASKS, RuleError, choose
from bench.regimes import REGIMES, REPO, Regime
from bench.row_merge import (Keying, MergeError, add_clash_arguments, clash_mode, load_rows, merge_rows,
                             merge_summary, result_file, rows_path, rows_with, save_rows)
from norga.config import Config

RESULTS = REPO / "studies" / "task_ablation" / "task_ablation"
ARM = "norga_tanh"


def cell_config(regime: Regime, level: str, seed: int, extra: Sequence[str], quick: bool,
                combined: Sequence[str] = ()) -> Config:
    """The regime's norga_tanh arm with the level's overrides, the seed and ``extra`` (data root, weights); the
    level ``combination`` applies the overrides of the levels ``combined`` at once."""
    base = regime.config(ARM, quick, [f"seed={seed}", *extra])
    overrides = combined_overrides(base, combined) if level == COMBINATION else LEVELS[level](base)
    return regime.config(ARM, quick, [f"seed={seed}", *extra, *overrides])


def run_cell(cfg: Config, tasks: Sequence[int] = TASKS) -> List[dict]:
    """Learn ``tasks`` (from task 0 on) with ``cfg``; one row per task from the method's diagnostics."""
    import torch

    from norga.engine.loaders import task_loaders, test_loader
    from norga.engine.task_loop import build_data, build_vit, resolve_config
    from norga.methods import build_method
    from norga.toolkit.devices import resolve_device
    from norga.toolkit.seeding import seed_everything, task_seed

    cfg = resolve_config(cfg)
    vit = build_vit(cfg)
    bench = build_data(cfg, vit)
    method = build_method(cfg, vit, bench.task_classes, resolve_device(cfg.device))
    rows = []
    for t in range(max(tasks) + 1):
        start = time.time()
        loaders = task_loaders(cfg, bench, t, method.train_batch_size, test_loader(cfg, bench, t))
        seed_everything(task_seed(cfg.seed, t))
        with torch.random.fork_rng(devices=[]):
            method.learn_task(t, loaders)
        if t in tasks:
            rows.append(row_of(method.describe()["diagnostics"][t], time.time() - start, method.wtp_history))
    return rows


def row_of(d: dict, seconds: float, history: Sequence[dict] = ()) -> dict:
    """One task's diagnostics -> a result row (accuracies as fractions); ``history``: WTP's epoch means
    (``method.wtp_history``), kept as the CE and regulariser curves (one value per epoch, 5 significant digits)."""
    return {"task": d["task"], "delta": d["til_prompted_before_tap"] - d["til_frozen_probe"],
            "til_prompted": d["til_prompted_before_tap"], "til_probe": d["til_frozen_probe"],
            "til_after_tap": d["til_prompted_after_tap"], "ce_first": d["wtp_first"].get("ce"),
            "ce_last": d["wtp_last"].get("ce"), "reg_first": d["wtp_first"].get("reg"),
            "reg_last": d["wtp_last"].get("reg"), "feat_trained": d["feature_change_trained"],
            "feat_random": d["feature_change_random"], "prompt_change": d["prompt_change"],
            "minutes": seconds / 60, "ce_curve": _curve(history, "ce"), "reg_curve": _curve(history, "reg")}


def _curve(history: Sequence[dict], term: str) -> List[float]:
    return [float(f"{h[term]:.5g}") for h in history if term in h]


# ---- command line ---------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--regime", choices=sorted(REGIMES), default="evidence")
    p.add_argument("--levels", nargs="+", choices=list(LEVELS), default=None, help="default: every level")
    p.add_argument("--combination", action="store_true", help="run the decision rule's combination instead")
    p.add_argument("--grid", type=Path, default=RESULTS, help="with --combination: the stem of the grid's rows")
    p.add_argument("--seeds", nargs="+", type=int, default=None,
                   help=f"default {list(GRID_SEEDS)} ({list(FRESH_SEEDS)} with --combination)")
    p.add_argument("--quick", action="store_true", help="the regime's quick keys (a check of the mechanism)")
    p.add_argument("--report", action="store_true", help="only regenerate the report from the committed rows")
    p.add_argument("--check", action="store_true", help="only check that the committed report is the rows' (exit 1)")
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--data-dir", type=Path, default=REPO / "runs" / "bench_data")
    p.add_argument("--fashion-dir", type=Path, default=None, help="Fashion-MNIST idx files (evidence regime)")
    p.add_argument("--results", type=Path, default=RESULTS, help="stem of the .json rows and the .md report")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="STEM",
                   help="merge the rows of these results stems (parallel processes' --results) into --results")
    add_clash_arguments(p)
    args = p.parse_args(argv)
    args.on_clash = clash_mode(p, args)
    if args.combination and args.levels:
        p.error("--combination runs the rule's pick of levels; leave out --levels")
    args.levels = args.levels or list(LEVELS)
    args.seeds = args.seeds or list(FRESH_SEEDS if args.combination else GRID_SEEDS)
    return args


CELL = Keying(key=lambda r: (r["regime"], r["level"], int(r["seed"]), int(r["task"])),
              text=lambda k: f"{k[0]} {k[1]} seed {k[2]} task {k[3]}", group=lambda r: r["level"],
              unknown="names no level of studies.task_ablation.run (levels: {groups})",
              results=("delta", "til_prompted", "til_probe", "til_after_tap"))


def merge(rows: List[dict], lanes: Sequence[Path], on_clash: str) -> List[dict]:
    """--merge: the lanes' rows added to ``rows``; a cell held with other values is one clear error, unless
    ``on_clash`` replaces it or keeps the held row (bench/row_merge.py)."""
    try:
        merged, added, clashed = merge_rows(rows, [(str(s), load_rows(s)) for s in lanes],
                                            [*LEVELS, COMBINATION], on_clash, CELL)
    except MergeError as err:
        raise SystemExit(f"error: {err}")
    print(merge_summary(added, clashed, len(merged), on_clash))
    return merged


def rule_combination(grid: Path) -> List[str]:
    """The levels the decision rule combines, from the grid's rows (exits naming the missing cells)."""
    try:
        return combination_levels(choose(load_rows(grid)))
    except RuleError as err:
        raise SystemExit(f"error: {err} (in {rows_path(grid)}; merge the lanes' rows first)")


def _done(rows: List[dict], tag: dict) -> bool:
    """Whether the cell ``tag`` has rows; a cell held with other combined levels, or on another recorded
    backbone, is an error (rows from before backbones were recorded have none to compare)."""
    held = rows_with(rows, regime=tag["regime"], level=tag["level"], seed=tag["seed"])
    cell = f"{tag['regime']} {tag['level']} seed {tag['seed']}"
    if held and held[0].get("combined") != tag.get("combined"):
        raise SystemExit(f"error: {cell} already ran combining {held[0].get('combined')}, not "
                         f"{tag.get('combined')}; the grid's rows changed since")
    if held and held[0].get("backbone", tag["backbone"]) != tag["backbone"]:
        raise SystemExit(f"error: {cell} already ran on backbone {held[0]['backbone']}, not {tag['backbone']} "
                         "(sha256 of model.checkpoint, first 16 hex digits); give these rows their own --results")
    return bool(held)


def backbone_of(extra: Sequence[str]) -> Optional[str]:
    """The first 16 hex digits of the sha256 of the last ``model.checkpoint=`` file among ``extra`` (None: no
    local weights file named)."""
    from norga.engine.tracker import checkpoint_id

    paths = [e.split("=", 1)[1] for e in extra if e.startswith("model.checkpoint=")]
    return checkpoint_id(paths[-1]) if paths else None


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv=None) -> int:
    from bench.regime_data import regime_extra

    args = parse_args(argv)
    if args.fashion_dir is None:
        from bench.mixed_domains import FASHION_DIR

        args.fashion_dir = FASHION_DIR
    rows_file, report_path = rows_path(args.results), result_file(args.results, ".md")
    rows = load_rows(args.results)
    if args.check:
        return write_report(rows, report_path, _shown(rows_file), check=True)
    if args.merge:
        rows = merge(rows, args.merge, args.on_clash)
        save_rows(args.results, rows)
    elif not args.report:
        combined = rule_combination(args.grid) if args.combination else None
        regime = REGIMES[args.regime]
        extra = regime_extra(regime, args)
        backbone = backbone_of(extra)
        for seed in args.seeds:
            for level in [COMBINATION] if args.combination else args.levels:
                tag = {"regime": regime.name + ("_quick" if args.quick else ""), "level": level, "seed": seed,
                       "backbone": backbone}
                if combined is not None:
                    tag["combined"] = combined
                if _done(rows, tag):
                    continue
                cell = run_cell(cell_config(regime, level, seed, extra, args.quick, combined or ()))
                rows += [{**tag, **row} for row in cell]
                save_rows(args.results, rows)
                print(f"{tag}: delta " + ", ".join(f"task {r['task']} {100 * r['delta']:+.1f} pp" for r in cell),
                      flush=True)
    write_report(rows, report_path, _shown(rows_file))
    write_curves(rows, result_file(args.results, ".png"))
    print(report_path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
