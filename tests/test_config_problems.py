"""Config mistakes (issue #53): duplicate YAML keys, every problem reported at once, a method switched by --set,
and the resolved config with each value's origin (``norga configs resolve``, ``train --dry-run --print-config``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT as REPO
from faults import TINY, assert_one_line_error
from norga.commands.cli import main as norga
from norga.config import ConfigError, load_config
from norga.config.origins import resolved_lines

SMOKE = REPO / "configs" / "smoke.yaml"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def cli(capsys, *argv: str):
    status = norga(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- duplicate keys ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, key, first, second", [
    ("seed: 1\nseed: 2\n", "seed", 1, 2),
    ("method:\n  wtp: {epochs: 1}\n  wtp: {lr: 0.01}\n", "wtp", 2, 3),
    ("method:\n  wtp:\n    epochs: 1\n    lr: 0.1\n    epochs: 3\n", "epochs", 3, 5),
    ("data: {name: synthetic, num_tasks: 2, num_tasks: 5}\n", "num_tasks", 1, 1),
])
def test_a_duplicate_key_names_the_key_and_both_lines(tmp_path, text, key, first, second):
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:{second}: duplicate key {key!r}, first at {path}:{first}" in str(err.value)


def test_a_duplicate_key_in_a_base_file_names_that_file(tmp_path, capsys):
    base = write(tmp_path, "base.yaml", "device: cpu\nlogging:\n  tensorboard: false\n  tensorboard: true\n")
    child = write(tmp_path, "child.yaml", "base: base.yaml\nseed: 3\n")
    out = tmp_path / "run"
    status, _, err = cli(capsys, "train", "--config", str(child), "--output-dir", str(out))
    assert_one_line_error(status, err, f"{base}:4: duplicate key 'tensorboard', first at {base}:3")
    assert not out.exists()


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    path = write(tmp_path, "c.yaml", "seed: 5\ndata:\n  <<: {name: synthetic, num_tasks: 2}\n  num_tasks: 4\n")
    assert load_config(path).data.num_tasks == 4


# ---- every problem at once ----------------------------------------------------------------------------------
FIVE_MISTAKES = """\
seed: -1
eval_mask_unseen: yes
data: {name: synthetic, num_tasks: 0}
method:
  wtp: {epoch: 3, lr: fast}
"""


def test_every_config_problem_is_reported_in_one_error(tmp_path, capsys):
    path = write(tmp_path, "c.yaml", FIVE_MISTAKES)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    problems = err.value.problems
    assert len(problems) == 5, problems
    for fragment in ("seed: expected an integer in [0, 2**43)", "eval_mask_unseen: expected true or false",
                     "data.num_tasks: must be >= 1", "unknown key(s) ['method.wtp.epoch']",
                     "method.wtp.lr: expected a number, got 'fast'"):
        assert sum(fragment in p for p in problems) == 1, (fragment, problems)
    status, _, stderr = cli(capsys, "train", "--config", str(path), "--output-dir", str(tmp_path / "run"))
    assert_one_line_error(status, stderr, "5 problems in the config: (1) ", "(5) ")
    assert not (tmp_path / "run").exists()


def test_overrides_and_values_are_reported_together():
    with pytest.raises(ConfigError) as err:
        load_config(SMOKE, ["seed", "amp=fp32", "device=gpu", "compile=fast", "method.tii.lr=[1,"])
    problems = err.value.problems
    assert len(problems) == 5, problems
    assert [p.split(":")[0].split(" ")[0] for p in problems] == ["override", "override", "amp", "compile", "device"]


def test_a_check_across_fields_is_not_run_on_a_default_standing_in_for_a_wrong_value():
    # l2p checks top_k <= pool_size; with top_k mistyped its default would be judged against pool_size 1
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs" / "smoke" / "l2p.yaml", ["method.top_k=many", "method.pool_size=1"])
    assert err.value.problems == ["method.top_k: expected an integer, got 'many'"]
    with pytest.raises(ConfigError, match="exceeds method.pool_size"):  # the check itself still works
        load_config(REPO / "configs" / "smoke" / "l2p.yaml", ["method.top_k=5", "method.pool_size=1"])


# ---- switching methods with --set ---------------------------------------------------------------------------
def test_switching_the_method_by_set_is_one_error_suggesting_both_ways(capsys, tmp_path):
    status, _, err = cli(capsys, "train", "--config", str(SMOKE), "--set", "method.name=l2p", "--dry-run")
    line = assert_one_line_error(status, err, "--set method.name=l2p", "method={name: l2p}", "smoke/l2p.yaml")
    assert "unknown key" not in line and "method.wtp" in line
    suggested = re.search(r"start from (\S+\.yaml)", line).group(1)
    assert load_config(suggested).method.name == "l2p"  # as --config takes it, in a checkout or installed
    assert load_config(SMOKE, ["method={name: l2p}"]).method.name == "l2p"  # the other suggestion works as given
    assert load_config(SMOKE, ["method.name=hideprompt", "method.gate={name: linear}"]).method.name == "hideprompt"


# ---- the resolved config with origins -----------------------------------------------------------------------
def test_config_show_gives_every_value_with_its_origin(tmp_path, capsys):
    write(tmp_path, "base.yaml", "device: cpu\ndata:\n  name: synthetic\n  num_tasks: 2\nmethod:\n  wtp: {epochs: 4}\n")
    child = write(tmp_path, "child.yaml", "base: base.yaml\ndata:\n  num_tasks: 5\nseed: 7\n")
    status, out, err = cli(capsys, "configs", "resolve", str(child), "--set", "method.wtp.lr=0.5")
    assert status == 0, err
    origin = {}
    for line in out.splitlines():
        text, _, comment = line.partition("  # ")
        if comment:
            origin[text.strip()] = comment
    assert origin["seed: 7"] == f"{child}:4" and origin["num_tasks: 5"] == f"{child}:3"
    assert origin["device: cpu"] == f"{tmp_path / 'base.yaml'}:1 (base)"
    assert origin["epochs: 4"] == f"{tmp_path / 'base.yaml'}:6 (base)"
    assert origin["lr: 0.5"] == "--set method.wtp.lr=0.5"
    assert origin["eval_batch_size: 256"] == "default"
    # the printed text is the resolved config itself: read back, it is the same config
    shown = yaml.safe_load(out)
    assert load_config(write(tmp_path, "shown.yaml", yaml.safe_dump(shown))) == load_config(child,
                                                                                         ["method.wtp.lr=0.5"])


def test_dry_run_prints_the_resolved_config_on_request(tmp_path, capsys):
    args = ["--config", str(SMOKE), "--output-dir", str(tmp_path / "run"), *TINY]
    status, out, err = cli(capsys, "train", *args, "--dry-run", "quick", "--print-config")
    assert status == 0, err
    overrides = [a for a in TINY if a != "--set"]
    assert out.startswith("\n".join(resolved_lines(SMOKE, overrides)) + "\n")
    assert "dry run OK" in out and not (tmp_path / "run").exists()
    status, plain, _ = cli(capsys, "train", *args, "--dry-run", "quick")
    assert status == 0 and "# --set method.wtp.epochs=2" not in plain  # without the option: as before


def test_config_show_of_a_broken_config_is_the_one_error(tmp_path, capsys):
    status, out, err = cli(capsys, "configs", "resolve", str(write(tmp_path, "c.yaml", FIVE_MISTAKES)))
    assert_one_line_error(status, err, "5 problems in the config")
    assert out == ""
