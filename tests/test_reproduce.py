"""norga reproduce: the report's numbers by hand on fixed run folders, protocols in the report, the dry run and the
quick GPU check's plan, and (integration) a tiny grid of 2 methods x 2 seeds end to end, killed and resumed. The
manifest's own content: tests/test_reproduce_manifest.py."""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from norga.reproduce.manifest import ManifestError, load_manifest, select
from norga.reproduce.report import aggregate, fill_readme, write_report

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "configs" / "reproduce" / "paper.yaml"
QUICK = REPO / "configs" / "reproduce" / "quick_gpu.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
TINY = ["method.tii.epochs=2", "method.tii.align_epochs=2", "method.tii.samples_per_class=16", "method.wtp.epochs=2",
        "method.tap.epochs=2", "method.tap.samples_per_class=16", "method.diagnostics=false"]


def write_manifest(tmp: Path, cells: list, seeds=(0, 1)) -> Path:
    path = tmp / "manifest.yaml"
    path.write_text(yaml.safe_dump({"paper": "test", "seeds": list(seeds), "cells": cells}, sort_keys=False))
    return path


# ---- the report by hand -----------------------------------------------------------------------------------
def put_run(folder: Path, fa: float, ca: float, fm: float, status="complete", done=3):
    (folder / "checkpoints").mkdir(parents=True)
    for task in range(done):  # the status counts no task without its checkpoint and checksum file
        for name in (f"task_{task:02d}.pt", f"task_{task:02d}.pt.sha256"):
            (folder / "checkpoints" / name).write_text("x")
    official = {"FA": fa, "CA": ca, "FM": fm}
    (folder / "metrics.json").write_text(json.dumps({"FA": fa, "CA": ca + 0.5, "FM": 0.0, "official": official,
                                                     "num_tasks": 3, "completed_tasks": done, "status": status}))


def test_report_numbers_by_hand(tmp_path):
    smoke = str(REPO / "configs" / "smoke.yaml")
    path = write_manifest(tmp_path, [
        {"id": "a", "table": 1, "benchmark": "synthetic", "backbone": "tiny", "method": "norga", "config": smoke,
         "published": {"FA": [50.0, 1.0], "CA": [60.0, 0.5], "FM": [10.0, None]}, "source": "Table 1, row x"},
        {"id": "b", "table": 2, "benchmark": "synthetic", "backbone": "tiny", "method": "l2p", "config": None,
         "missing": "no config", "published": {"FA": [40.0, None]}}], seeds=(0, 1, 2, 3))
    cells = load_manifest(path).cells
    out = tmp_path / "out"
    put_run(out / "a" / "seed0", 0.50, 0.61, 0.10)
    put_run(out / "a" / "seed1", 0.52, 0.62, 0.12)
    put_run(out / "a" / "seed2", 0.48, 0.63, 0.14)
    put_run(out / "a" / "seed3", 0.99, 0.99, 0.99, status="incomplete", done=2)  # partial: never averaged
    rows = aggregate(cells, out)
    fa, ca, fm = rows[0]["metrics"]
    assert rows[0]["status"] == {"0": "complete", "1": "complete", "2": "complete", "3": "partial"}
    assert fa["n"] == 3 and fa["mean"] == pytest.approx(50.0) and fa["std"] == pytest.approx(2.0)
    assert fa["difference"] == pytest.approx(0.0) and fa["within"] is True
    assert ca["mean"] == pytest.approx(62.0) and ca["std"] == pytest.approx(1.0)  # official block, not top level
    assert ca["difference"] == pytest.approx(2.0) and ca["within"] is False  # |+2.00| > 0.5
    assert fm["mean"] == pytest.approx(12.0) and fm["within"] is None  # no published std: no decision
    assert rows[1]["runnable"] is False and rows[1]["metrics"][0]["n"] == 0
    md, js = write_report(rows, out, "test report")
    text = md.read_text()
    assert "| a | FA | 3 | 50.00 ± 2.00 | 50.00 ± 1.00 | +0.00 | yes |" in text
    assert "| a | CA | 3 | 62.00 ± 1.00 | 60.00 ± 0.50 | +2.00 | **no** |" in text
    assert "| b | FA | 0 | – | 40.00 | – | – | not runnable: no config |" in text
    assert json.loads(js.read_text())["cells"][0]["metrics"][0]["values"] == pytest.approx([50.0, 52.0, 48.0])
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- reproduce:gpu -->\n| old |\n<!-- /reproduce:gpu -->\ny\n")
    assert fill_readme(readme, rows) == 3  # a's FA, CA, FM; b has no complete run
    assert readme.read_text().splitlines()[4] == "| a | 3 | FA | 50.00 ± 2.00 | 50.00 ± 1.00 | +0.00 | yes |"
    assert readme.read_text().endswith("<!-- /reproduce:gpu -->\ny\n") and "| old |" not in readme.read_text()
    one = aggregate([c for c in cells if c.id == "a"], tmp_path / "empty")[0]["metrics"][0]
    assert one["n"] == 0 and one["mean"] is None and one["within"] is None
    assert not math.isnan(fa["std"])


def test_protocols_keep_cells_of_different_protocols_apart(tmp_path):
    """Cells of two protocols: each names its own, selection by protocol, one report table per protocol."""
    smoke = str(REPO / "configs" / "smoke.yaml")
    cell = {"table": 1, "benchmark": "synthetic", "backbone": "tiny", "config": smoke, "source": "x"}
    raw = {"paper": "test", "seeds": [0], "protocol": "p10",
           "protocols": {"p10": {"label": "10 tasks, seed 1993"}, "p20": {"label": "20 tasks, seed 1993"}},
           "cells": [{**cell, "id": "a", "method": "slca", "published": {"FA": [91.5, None]}},
                     {**cell, "id": "b", "method": "mos", "protocol": "p20", "published": {"FA": [89.0, None]}}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    m = load_manifest(path)
    assert [(c.id, c.protocol, c.protocol_label) for c in m.cells] == [
        ("a", "p10", "10 tasks, seed 1993"), ("b", "p20", "20 tasks, seed 1993")]
    assert [c.id for c in select(m, protocols=["p20"])] == ["b"]
    with pytest.raises(ManifestError, match="unknown protocol 'p5'; valid: p10, p20"):
        select(m, protocols=["p5"])
    out = tmp_path / "out"
    put_run(out / "a" / "seed0", 0.90, 0.95, 0.02)
    put_run(out / "b" / "seed0", 0.88, 0.93, 0.03)
    text = write_report(aggregate(m.cells, out), out, "two protocols")[0].read_text()
    head_a, head_b = "## Protocol `p10`: 10 tasks, seed 1993", "## Protocol `p20`: 20 tasks, seed 1993"
    assert text.index(head_a) < text.index("| a | FA |") < text.index(head_b) < text.index("| b | FA |")
    readme = tmp_path / "README.md"
    readme.write_text("<!-- reproduce:gpu -->\n<!-- /reproduce:gpu -->\n")
    assert fill_readme(readme, aggregate(m.cells, out)) == 2
    lines = readme.read_text().splitlines()
    assert lines.index("Protocol `p10`: 10 tasks, seed 1993:") < lines.index(
        "| a | 1 | FA | 90.00 | 91.50 | -1.50 | – |")
    assert lines.index("Protocol `p20`: 20 tasks, seed 1993:") < lines.index(
        "| b | 1 | FA | 88.00 | 89.00 | -1.00 | – |")


@pytest.mark.parametrize("change, message", [
    ({"protocols": {"p10": {}}}, "protocols must map each name to a mapping with a label"),
    ({"protocol": "p99"}, "protocol 'p99' is not under protocols: .defined: \\['p10'\\]"),
    ({"protocol": None}, "cell a: missing key 'protocol'"),
    ({"cell_protocol": "p20"}, "cell a: unknown protocol 'p20'; the manifest defines \\['p10'\\]"),
    ({"protocols": None, "protocol": None, "cell_protocol": "p10"}, "cell a: unknown protocol 'p10'; define it under"),
])
def test_protocol_mistakes_are_one_error_naming_the_fix(tmp_path, change, message):
    raw = {"paper": "t", "protocol": "p10", "protocols": {"p10": {"label": "ten"}},
           "cells": [{"id": "a", "table": 1, "benchmark": "b", "backbone": "r", "method": "m", "config": None,
                      "missing": "x"}]}
    raw.update({k: v for k, v in change.items() if k != "cell_protocol"})
    if "cell_protocol" in change:
        raw["cells"][0]["protocol"] = change["cell_protocol"]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ManifestError, match=message):
        load_manifest(path)


# ---- the tiny grid end to end -------------------------------------------------------------------------------
def tiny_manifest(tmp: Path) -> Path:
    cells = [{"id": f"tiny-{m}", "table": 1, "benchmark": "synthetic", "backbone": "tiny", "method": m,
              "config": str(REPO / "configs" / "smoke" / f"{m}.yaml"), "overrides": TINY,
              "expected": {"FA": [0.0, 100.0]}, "source": "tiny grid"} for m in ("norga", "hideprompt")]
    cells.append({"id": "tiny-l2p", "table": 1, "benchmark": "synthetic", "backbone": "tiny", "method": "l2p",
                  "config": None, "missing": "not part of the tiny grid"})
    return write_manifest(tmp, cells)


def reproduce(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "norga", "reproduce", *args], capture_output=True, text=True,
                          env=ENV, cwd=REPO, timeout=600)


@pytest.mark.integration
def test_tiny_grid_runs_resumes_after_a_kill_and_reports(tmp_path):
    manifest, out = tiny_manifest(tmp_path), tmp_path / "grid"
    dry = reproduce("--manifest", str(manifest), "--out", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "not runnable: not part of the tiny grid" in dry.stdout
    assert "3 cells (2 runnable here, 0 lacking data or weights here, 1 not runnable), 4 runs" in dry.stdout
    assert "seeds: 0 missing, 1 missing; est. " in dry.stdout and "n/a (CPU)" in dry.stdout
    # the first run completes, the second is killed while training
    proc = subprocess.Popen([sys.executable, "-m", "norga", "reproduce", "--manifest", str(manifest),
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=REPO)
    second = out / "tiny-norga" / "seed1"
    deadline = time.time() + 300
    while (not (second / "checkpoints" / "task_00.pt.sha256").is_file() and time.time() < deadline
           and proc.poll() is None):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = out / "tiny-norga" / "seed0" / "metrics.json"
    assert json.loads(first.read_text())["status"] == "complete"
    stamp = first.stat().st_mtime_ns
    done = reproduce("--manifest", str(manifest), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "[1/4] tiny-norga seed 0: complete, skipped" in done.stdout
    assert "[2/4] tiny-norga seed 1: resuming" in done.stdout
    assert first.stat().st_mtime_ns == stamp  # the finished run was not trained again
    report = json.loads((out / "reproduce.json").read_text())
    assert [c["complete_seeds"] for c in report["cells"]] == [[0, 1], [0, 1], []]
    assert all(c["metrics"][0]["n"] == 2 and c["metrics"][0]["within"] is True for c in report["cells"][:2])
    text = (out / "reproduce.md").read_text()
    assert "tiny-norga/seed0/plots/acc_matrix.png" in text
    again = reproduce("--manifest", str(manifest), "--out", str(out), "--report")
    assert again.returncode == 0 and (out / "reproduce.md").read_text() == text


def test_dry_run_says_which_cells_lack_their_data_or_weights_here(tmp_path):
    absent = tmp_path / "absent"
    cells = [{"id": "tiny-norga", "table": 1, "benchmark": "cifar100", "backbone": "tiny", "method": "norga",
              "config": str(REPO / "configs" / "smoke" / "norga.yaml"), "expected": {"FA": [0.0, 100.0]},
              "overrides": [*TINY, f"data.root={absent}/data", f"model.checkpoint={absent}/vit.pt"], "source": "t"},
             {"id": "tiny-hideprompt", "table": 1, "benchmark": "synthetic", "backbone": "tiny",
              "method": "hideprompt", "config": str(REPO / "configs" / "smoke" / "hideprompt.yaml"),
              "overrides": TINY, "expected": {"FA": [0.0, 100.0]}, "source": "t"}]
    dry = reproduce("--manifest", str(write_manifest(tmp_path, cells)), "--out", str(tmp_path / "grid"),
                    "--dry-run", "--no-estimate")
    assert dry.returncode == 0, dry.stderr
    [missing] = [line.strip() for line in dry.stdout.splitlines() if "not runnable here" in line]
    assert missing == (f"not runnable here, missing: data {absent}/data (norga data prepare cifar100 --root "
                       f"{absent}/data, or --data cifar100=PATH); weights {absent}/vit.pt (--weights tiny=PATH)")
    assert "2 cells (1 runnable here, 1 lacking data or weights here, 0 not runnable), 4 runs" in dry.stdout
    assert not (tmp_path / "grid").exists()


def test_print_commands_and_bad_input(tmp_path):
    manifest = tiny_manifest(tmp_path)
    cmds = reproduce("--manifest", str(manifest), "--out", "runs/x", "--print-commands", "--nproc", "2")
    assert cmds.returncode == 0, cmds.stderr
    lines = cmds.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("torchrun --nproc_per_node=2 -m norga train --config ")
                                   for line in lines)
    assert "--output-dir runs/x/tiny-hideprompt/seed1" in lines[3] and "--set seed=1" in lines[3]
    paths = reproduce("--table", "1", "--only", "t1-cifar100-ibot21k-norga", "--seeds", "1", "--print-commands",
                      "--weights", "ibot21k=/w/ibot.pth", "--data", "cifar100=/d/c100", "--set", "amp=bf16")
    assert paths.returncode == 0, paths.stderr
    assert paths.stdout.strip().endswith("--set seed=42 --set model.checkpoint=/w/ibot.pth --set data.root=/d/c100 "
                                         "--set amp=bf16   # missing") and len(paths.stdout.splitlines()) == 1
    bad = reproduce("--table", "1", "--rows", "sup22k", "--dry-run")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: unknown row 'sup22k'; valid: dino1k, ibot1k, ibot21k, moco1k, sup21k"]


def test_quick_check_stage_timings(tmp_path):
    """Per-stage seconds from consecutive epoch-log lines, images/s = steps x the stage's batch / seconds."""
    from norga.config import load_config
    from norga.reproduce.quick import stage_timings, timing_lines

    lines = [{"stage": "tii", "task": 0, "epoch": 0, "time": 100.0, "steps": 2},
             {"stage": "wtp", "task": 0, "epoch": 0, "time": 104.0, "steps": 4},
             {"stage": "wtp", "task": 0, "epoch": 1, "time": 106.0, "steps": 4}]
    (tmp_path / "epochs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    cfg = load_config(REPO / "configs" / "smoke.yaml")  # wtp batch 64
    stages = stage_timings(tmp_path, cfg)
    assert stages["wtp"] == {"seconds": 6.0, "steps": 8, "img_s": pytest.approx(8 * 64 / 6.0)}
    assert stages["tii"]["seconds"] == 0.0 and stages["tii"]["img_s"] is None
    text = timing_lines({"runs": {"r/seed0": {"stages": stages, "peak_mib": "n/a (CPU)"}}, "passes_img_s": None})
    assert "| r/seed0 | wtp | 6.0 | 8 | 85 | n/a (CPU) |" in text


def test_dry_run_lists_every_published_cell_with_its_command():
    """The issue's "done when": every cell of the paper's manifest is listed with its command (estimates need
    torch and a timing, covered by the tiny grid's dry run)."""
    dry = reproduce("--dry-run", "--no-estimate", "--out", "runs/repro")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert sum(line.startswith(("t1-", "t2-")) for line in lines) == 84
    newer_cells = [c for c in load_manifest(PAPER).cells if c.table == 3]  # the newer methods' own cells (#57)
    newer = sum(line.startswith("t3-") for line in lines)
    assert newer == len(newer_cells) >= 2 and all(c.runnable for c in newer_cells)
    assert sum(line.strip().startswith("$ norga train --config configs/") for line in lines) == 68 + newer
    assert sum("not runnable: no shipped" in line for line in lines) == 16
    cells, here, lacking, runs = map(int, re.search(
        r"(\d+) cells \((\d+) runnable here, (\d+) lacking data or weights here, 16 not runnable\), (\d+) runs; "
        r"estimated total \? \(--no-estimate\)", dry.stdout).groups())
    assert cells == 84 + newer and runs == 204 + sum(len(c.seeds) for c in newer_cells)
    assert here + lacking == 68 + newer and sum("not runnable here, missing: " in line for line in lines) == lacking


def test_quick_check_states_its_minutes_as_an_estimate_until_measured_rates_exist(tmp_path):
    """Without a rates file the line says "estimate"; with the GPU check's gpu_rates.json it names the measurement
    and its minutes follow the measured rates (twice the rates: half the time)."""
    from norga.reproduce.quick import ASSUMED_RATES, expected_line
    from norga.reproduce.runner import check_configs, expand

    manifest = load_manifest(QUICK)
    runs = expand(select(manifest, None, [], [], None), tmp_path, [], {}, None, {})
    configs = check_configs(runs)
    assumed = expected_line(runs, configs, manifest, tmp_path / "absent.json")
    assert "estimate" in assumed and "no GPU check has measured" in assumed
    rates = {k: 2 * v for k, v in ASSUMED_RATES.items() if k != "batch"}
    path = tmp_path / "gpu_rates.json"
    path.write_text(json.dumps({**rates, "batch": 64, "amp": "bf16", "device": "NVIDIA H200", "date": "then"}))
    measured = expected_line(runs, configs, manifest, path)
    assert "measured by python -m bench.gpu_check on NVIDIA H200" in measured and "estimate" not in measured
    minutes = [float(line.split(": ")[1].split(" min")[0]) for line in (assumed, measured)]
    assert minutes[1] == pytest.approx(minutes[0] / 2, abs=1)
    path.write_text("{}")
    with pytest.raises(Exception, match="not a rates file"):
        expected_line(runs, configs, manifest, path)
