"""The real-data benchmark's own machinery: mixed-domain data file, statistics over seeds, results files, configs."""
from __future__ import annotations

import gzip
import json
import math
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from bench import mixed_domains, real_data_cpu  # noqa: E402
from norga.config import load_config  # noqa: E402
from norga.data.benchmark import build_benchmark  # noqa: E402


def _write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def sources(tmp_path):
    """Tiny stand-ins in the real layouts: shared/data/{mnist,cifar100}.npz and Fashion-MNIST idx files."""
    rng = np.random.default_rng(0)
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    for name, shape, classes in (("mnist", (28, 28), 10), ("cifar100", (32, 32, 3), 100)):
        arrays = {f"{s}_{k}": v for s, n in (("train", 4), ("test", 2)) for k, v in (
            ("x", rng.integers(1, 255, (classes * n, *shape), dtype=np.uint8)),
            ("y", np.repeat(np.arange(classes), n)))}
        np.savez(data / f"{name}.npz", **arrays, classes=np.array([f"{name}{c}" for c in range(classes)]))
    fashion = tmp_path / "fashion"
    fashion.mkdir()
    for stem, n in (("train", 4), ("t10k", 2)):
        _write_idx(fashion / f"{stem}-images-idx3-ubyte.gz", rng.integers(1, 255, (10 * n, 28, 28)))
        _write_idx(fashion / f"{stem}-labels-idx1-ubyte.gz", np.repeat(np.arange(10), n))
    return tmp_path / "shared", fashion


def test_mixed_domains_file_layout(sources, tmp_path, monkeypatch):
    monkeypatch.setattr(mixed_domains, "POOL_TRAIN", 3)
    monkeypatch.setattr(mixed_domains, "POOL_TEST", 2)
    out = mixed_domains.build(*sources, tmp_path / "mixed.npz")
    with np.load(out) as f:
        assert f["train_x"].shape == (4 * 10 * 3, 32, 32, 3) and f["test_x"].shape == (4 * 10 * 2, 32, 32, 3)
        assert list(f["task_names"]) == list(mixed_domains.DOMAINS)
        assert f["task_groups"].tolist() == [list(range(10 * t, 10 * t + 10)) for t in range(4)]
        grey = f["train_x"][f["train_y"] == 3][0]  # an MNIST image: zero border of 2 px, equal channels
        assert grey[:2].max() == 0 and grey[:, -2:].max() == 0 and grey[2:-2, 2:-2].min() > 0
        assert (grey[..., 0] == grey[..., 2]).all()
        assert str(f["classes"][25]) == "cifar100_a:cifar1005" and str(f["classes"][11]) == "fashion_mnist:Trouser"
    bench = build_benchmark("array", out, 4, seed=3, image_size=16, transforms="plain", train_per_class=2)
    assert sorted(bench.info()["datasets"]) == sorted(mixed_domains.DOMAINS)
    before = out.stat().st_mtime_ns
    assert mixed_domains.build(*sources, out).stat().st_mtime_ns == before  # same recipe: reused
    monkeypatch.setattr(mixed_domains, "POOL_TEST", 1)
    with np.load(mixed_domains.build(*sources, out)) as f:  # changed recipe: rebuilt
        assert f["test_x"].shape[0] == 40


def test_missing_fashion_mnist_names_the_fix(sources, tmp_path):
    with pytest.raises(SystemExit, match="apt-get install -y dataset-fashion-mnist"):
        mixed_domains.build(sources[0], tmp_path / "nowhere", tmp_path / "mixed.npz")


def _rows():
    """Two arms over three seeds with hand-picked values (fractions)."""
    a = {1: 0.50, 2: 0.60, 3: 0.55}
    b = {1: 0.40, 2: 0.45, 3: 0.47}
    rows = []
    for arm, values in (("hideprompt", a), ("no_prompt", b)):
        for seed, v in values.items():
            rows.append({"run": arm, "seed": seed, "FA": v, "CA": v, "FM": 0.1, "TIL_FA": v + 0.2, "TII": 0.5,
                         "probe_gain": math.nan, "wtp_gain": math.nan, "feat_trained": math.nan,
                         "feat_random": math.nan, "minutes": 1.0})
    return rows


def test_paired_statistics_by_hand(tmp_path):
    regime = real_data_cpu.REGIMES["evidence"]
    stats = real_data_cpu.statistics(_rows(), regime)
    assert list(stats["arms"]) == ["hideprompt", "no_prompt"]
    assert stats["arms"]["hideprompt"]["FA"].mean == pytest.approx(55.0)
    seeds, diff = stats["pairs"]["hideprompt − no_prompt"]["FA"]
    assert seeds == [1, 2, 3]
    d = np.array([10.0, 15.0, 8.0])  # differences in points, t_{0.975, 2} = 4.302653
    half = 4.302653 * d.std(ddof=1) / math.sqrt(3)
    assert (diff.mean, diff.low, diff.high) == pytest.approx((d.mean(), d.mean() - half, d.mean() + half), abs=1e-4)
    stem = tmp_path / "res"
    real_data_cpu.save_results(_rows(), regime, stem, "header")
    text = stem.with_suffix(".md").read_text()
    assert "| hideprompt − no_prompt | 3 | +11.00 [+2.04, +19.96] *resolved*" in text
    assert json.loads(stem.with_suffix(".json").read_text()) == json.loads(json.dumps(_rows()))
    assert stem.with_suffix(".png").stat().st_size > 0


def test_unresolved_difference_is_not_marked(tmp_path):
    rows = _rows()
    for r in rows:
        if r["run"] == "no_prompt" and r["seed"] == 2:
            r["FA"] = 0.70  # differences +10, -10, +8: the interval contains 0
    line = [ln for ln in real_data_cpu.statistics_lines(real_data_cpu.statistics(rows, real_data_cpu.REGIMES[
        "evidence"])) if ln.startswith("| hideprompt − no_prompt")][0]
    assert "+2.67 [" in line and "*resolved*" not in line.split("|")[3]


@pytest.mark.parametrize("regime", sorted(real_data_cpu.REGIMES))
def test_every_arm_resolves_to_a_valid_config(regime, tmp_path):
    """Each arm's config loads and differs from the other arms only in method keys."""
    r = real_data_cpu.REGIMES[regime]
    configs = {arm: r.config(arm, quick=False) for arm in r.all_arms()}
    for arm in r.all_arms():
        quick = r.config(arm, quick=True)
        assert quick.method.name == configs[arm].method.name and quick.data.name == configs[arm].data.name
        if hasattr(quick.method, "wtp"):  # a HiDe-pipeline arm: --quick shortens its stages too
            assert quick.method.wtp.epochs == r.config("hideprompt", quick=True).method.wtp.epochs
    data = {c.data.name for c in configs.values()}, {c.data.num_tasks for c in configs.values()}
    assert all(len(s) == 1 for s in data)
    for arm, cfg in configs.items():
        if arm == "norga_headwise":  # the regime's method with another gate
            assert cfg.method.name == "norga" and cfg.method.gate["name"] == "norga_headwise"
        elif arm in r.optional:
            assert cfg.method.name == arm.split("_k")[0].split("_h")[0]  # lora_moe_k16_top5 -> lora_moe
            if arm not in ("simplecil", "ranpac"):  # no training at all
                trained = cfg.method.wtp if hasattr(cfg.method, "wtp") else cfg.method
                assert trained.epochs == configs["hideprompt"].method.wtp.epochs
        elif arm == "no_prompt":
            assert cfg.method.prompt_length == 0
        else:
            assert cfg.method.prompt_length > 0 and cfg.method.gate["name"] == ("linear" if arm == "hideprompt"
                                                                               else "norga")


# The arms as Python override strings before they became configs/bench/<regime>/<arm>.yaml (commit cf55557):
# the YAML arms must resolve to exactly these configs, quick or not.
_MOE = "method={{name: {}, epochs: 20, batch_size: 25, experts: {}, top_k: {}, rank: {}{}}}"
FORMER = {
    "evidence": {
        "config": "configs/bench/evidence_cpu.yaml",
        "arms": {"hideprompt": ["method.gate={name: linear}"],
                 "norga_tanh": ["method.gate={name: norga, activation: tanh}"],
                 "no_prompt": ["method.prompt_length=0"]},
        "optional": {"sprompt": ["method={name: sprompt, epochs: 20, batch_size: 25, lr: 0.01}"],
                     "l2p": ["method={name: l2p, epochs: 20, batch_size: 25, lr: 0.03, scale_lr_by_batch: true}"],
                     "dualprompt": ["method={name: dualprompt, epochs: 20, batch_size: 25, lr: 0.03, "
                                    "scale_lr_by_batch: true}"],
                     "coda": ["method={name: coda, epochs: 20, batch_size: 25, lr: 0.001}"],
                     "lora_moe": [_MOE.format("lora_moe", 4, 1, 7, "")],
                     "mh_moe": [_MOE.format("mh_moe", 4, 1, 2, ", heads: 6")],
                     "lora_moe_k16_top5": [_MOE.format("lora_moe", 16, 5, 2, "")],
                     "mh_moe_h2": [_MOE.format("mh_moe", 4, 1, 2, ", heads: 2")],
                     "mh_moe_h4": [_MOE.format("mh_moe", 4, 1, 2, ", heads: 4")],
                     "mh_moe_h8": [_MOE.format("mh_moe", 4, 1, 2, ", heads: 8")],
                     "norga_headwise": ["method.gate={name: norga_headwise, activation: tanh}"]},
        "quick": ["data.train_per_class=4", "data.test_per_class=4", "method.wtp.epochs=1", "method.tii.epochs=2",
                  "method.tii.align_epochs=1", "method.tap.epochs=1", "method.tap.samples_per_class=8"]},
    "cifar100_first": {
        "config": "configs/bench/cifar100_cpu.yaml",
        "arms": {"hideprompt": ["method.gate={name: linear}"],
                 "norga_tanh": ["method.gate={name: norga, activation: tanh}"],
                 "norga_sigmoid": ["method.gate.name=norga", "method.gate.activation=sigmoid"],
                 "norga_gelu": ["method.gate.name=norga", "method.gate.activation=gelu"],
                 "no_prompt": ["method.prompt_length=0"]},
        "optional": {},
        "quick": ["data.num_tasks=2", "data.classes_per_task=50", "data.train_per_class=3", "data.test_per_class=2",
                  "method.wtp.epochs=1", "method.tii.epochs=5", "method.tii.align_epochs=2", "method.tap.epochs=2"]},
}


def _former_overrides(former: dict, arm: str, quick: bool) -> list:
    own = former["optional"].get(arm)
    if own and any(o.startswith("method=") for o in own):
        return own + ([o for o in former["quick"] if o.startswith("data.")] + ["method.epochs=1"] if quick else [])
    return (former["arms"].get(arm) or own) + (former["quick"] if quick else [])


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_the_hidelora_arm_replaces_only_the_prompt(quick):
    """Against norga_tanh the evidence arm hidelora changes the WTP adapter, not the pipeline: the same TII, TAP,
    statistics and WTP budget (epochs, lr, batch, schedule, head lr), quick or not."""
    from dataclasses import asdict

    r = real_data_cpu.REGIMES["evidence"]
    lora, prompt = r.config("hidelora", quick).method, r.config("norga_tanh", quick).method
    assert asdict(lora.tii) == asdict(prompt.tii) and asdict(lora.tap) == asdict(prompt.tap)
    assert (lora.stats.kind, lora.stats.ridge) == (prompt.stats.kind, prompt.stats.ridge)
    same = ("epochs", "lr", "batch_size", "schedule", "head_lr_scale")
    assert [getattr(lora.wtp, k) for k in same] == [getattr(prompt.wtp, k) for k in same]
    assert lora.wtp.warmup_epochs == 0 and lora.scale_lr_by_batch == prompt.scale_lr_by_batch
    assert lora.lora_layers == prompt.prompt_layers and lora.rank == prompt.prompt_length


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("regime", sorted(FORMER))
def test_yaml_arms_resolve_to_the_former_override_configs(regime, quick):
    from norga.config import config_to_dict

    r, former = real_data_cpu.REGIMES[regime], FORMER[regime]
    assert r.arms == list(former["arms"]) and r.optional[:len(former["optional"])] == list(former["optional"])
    for arm in list(former["arms"]) + list(former["optional"]):  # arms added since (simplecil) have no former
        mine = config_to_dict(r.config(arm, quick))
        theirs = config_to_dict(load_config(REPO_ROOT / former["config"], _former_overrides(former, arm, quick)))
        if arm == "hideprompt":  # the linear gate is HiDe-Prompt's own method name now; the same computation
            assert (mine["method"]["name"], theirs["method"]["name"]) == ("hideprompt", "norga")
            theirs["method"]["name"] = "hideprompt"
        assert mine == theirs, f"{regime} arm {arm} (quick={quick}) resolves to another config"


def test_the_arm_comparison_can_fail(tmp_path):
    """A YAML arm with one value changed no longer equals its former override config."""
    from norga.config import config_to_dict

    r = real_data_cpu.REGIMES["evidence"]
    changed = tmp_path / "sprompt.yaml"
    changed.write_text(r.arm_config("sprompt").read_text().replace("lr: 0.01", "lr: 0.02").replace(
        "base: ../", f"base: {r.base.parent}/"))
    former = load_config(REPO_ROOT / FORMER["evidence"]["config"], FORMER["evidence"]["optional"]["sprompt"])
    assert config_to_dict(load_config(changed)) != config_to_dict(former)


def test_quick_overrides_flatten_nested_keys():
    from bench.regimes import flatten

    assert flatten({"data": {"train_per_class": 4}, "method": {"tap": {"epochs": 1}, "gate": {"name": "linear"}}}) \
        == ["data.train_per_class=4", "method.tap.epochs=1", 'method.gate.name="linear"']


def test_report_rewrites_tables_and_diagnostics_from_the_rows(tmp_path, capsys):
    rows = _rows()
    for r, gain in zip(rows[:3], (0.02, 0.04, 0.06)):
        r.update(probe_gain=gain, wtp_gain=0.0, feat_trained=0.3, feat_random=0.1)
    stem = tmp_path / "res"
    stem.with_suffix(".json").write_text(json.dumps(rows))
    assert real_data_cpu.main(["--report", "--results", str(stem)]) == 0
    text = stem.with_suffix(".md").read_text()
    half = 4.302653 * 2.0 / math.sqrt(3)  # gains 2, 4, 6 points: std 2
    assert f"| hideprompt | 3 | 4.00 [{4 - half:.2f}, {4 + half:.2f}] | 0.00 [0.00, 0.00] | 0.300" in text
    assert "| no_prompt | 3 |" not in text.split("Diagnostics")[1]  # no diagnostics without prompts
    with pytest.raises(SystemExit, match="no rows"):
        real_data_cpu.main(["--report", "--results", str(tmp_path / "none")])


def test_throughput_bench_prints_its_table_and_writes_json(tmp_path, capsys):
    from bench import throughput

    out = tmp_path / "tp.json"
    assert throughput.main(["--batch", "2", "--steps", "1", "--amp", "off", "bf16", "--task", "--json", str(out),
                            "--set", "data.num_tasks=2", "--set", "data.classes_per_task=2", "--set",
                            "data.options={num_classes: 4, train_per_class: 4, test_per_class: 2}"]) == 0
    result = json.loads(out.read_text())
    assert [(r["amp"], r["batch"]) for r in result["rows"]] == [("off", 2), ("bf16", 2)]
    for row in result["rows"]:
        assert all(row[k] > 0 for k in ("train_img_s", "frozen_img_s", "eval_img_s", "peak_mib"))
    assert result["rows"][0]["vs_off"] == 1.0
    assert set(result["stage_seconds"]) == {"off", "bf16"} and "wtp" in result["stage_seconds"]["off"]
    assert "| amp | batch | train img/s" in capsys.readouterr().out


def test_rows_of_methods_without_task_inference_or_diagnostics():
    metrics = {"FA": 0.5, "CA": 0.6, "FM": 0.1, "til_FA": 0.7, "tii_accuracy": None, "method": {"name": "l2p"}}
    row = real_data_cpu.row_of("l2p", 1, metrics, 2.0)
    assert math.isnan(row["TII"]) and math.isnan(row["probe_gain"]) and row["TIL_FA"] == 0.7
    line = real_data_cpu.rows_table([row])[-1]
    assert line.startswith("| l2p | 1 | 50.00 |") and "| – |" in line


def test_rows_table_shows_threads_where_recorded(tmp_path):
    """A row's torch threads are shown beside its minutes; a row without them (older rows) shows '–'."""
    rows = _rows()[:2]
    rows[0]["threads"] = 1
    lines = real_data_cpu.rows_table(rows)
    assert lines[0].endswith("| minutes | threads |") and lines[1].count("|---") == len(real_data_cpu.ROW_COLUMNS) + 4
    assert lines[2].endswith("| 1.0 | 1 |") and lines[3].endswith("| 1.0 | – |")


def test_a_run_finished_before_the_call_records_no_threads(tmp_path):
    run = tmp_path / "arm_seed1"
    assert not real_data_cpu._finished(run)
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"status": "incomplete"}))
    assert not real_data_cpu._finished(run)
    (run / "metrics.json").write_text(json.dumps({"status": "complete"}))
    assert real_data_cpu._finished(run)
    metrics = {"FA": 0.5, "CA": 0.5, "FM": 0.1, "til_FA": 0.6, "tii_accuracy": None}
    assert real_data_cpu.row_of("a", 1, metrics, 2.0, 2)["threads"] == 2
    assert real_data_cpu.row_of("a", 1, metrics, 2.0)["threads"] is None
