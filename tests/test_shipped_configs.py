"""The shipped configs: names for --config and --manifest, `norga configs` (list, show, copy), the manifest default,
in a checkout and as package data (an installed wheel is simulated by a copy of configs/ as norga/shipped).
The real wheel is built, installed and run by .ci/package-check."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT as REPO
from norga.commands.cli import main as norga
from norga.config import ConfigError, load_config, read_config_file, shipped
from norga.config.shipped import config_file, copy_config, description, shipped_names, shipped_root
from norga.reproduce.manifest import ManifestError, load_manifest, manifest_file

CONFIGS = REPO / "configs"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """norga as a wheel installs it: the configs are the package folder norga/shipped, no checkout beside it;
    the current folder is an empty one."""
    package = tmp_path / "site-packages" / "norga"
    shutil.copytree(CONFIGS, package / "shipped")
    monkeypatch.setattr(shipped, "files", lambda name: package)
    work = tmp_path / "user"
    work.mkdir()
    monkeypatch.chdir(work)
    return package / "shipped"


def test_the_checkout_keeps_one_copy_and_every_yaml_is_shipped():
    assert shipped_root() == CONFIGS.resolve()
    on_disk = {p.relative_to(CONFIGS).with_suffix("").as_posix() for p in CONFIGS.rglob("*.yaml")}
    assert set(shipped_names()) == on_disk and len(shipped_names()) == len(on_disk) > 50


def test_package_data_is_read_when_installed(installed):
    assert shipped_root() == installed.resolve()
    assert config_file("smoke/l2p") == installed.resolve() / "smoke" / "l2p.yaml"


@pytest.mark.parametrize("given, file", [("smoke", "smoke.yaml"), ("smoke.yaml", "smoke.yaml"),
                                         ("configs/smoke.yaml", "smoke.yaml"), ("smoke/l2p", "smoke/l2p.yaml"),
                                         ("cifar100_norga", "cifar100_norga.yaml"),
                                         ("bench/evidence/l2p", "bench/evidence/l2p.yaml")])
def test_names_resolve_to_the_shipped_file(installed, given, file):
    assert config_file(given) == installed.resolve() / file


def test_a_shipped_config_loads_with_its_base_among_the_shipped_configs(installed):
    by_name, by_path = load_config("smoke/l2p"), load_config(CONFIGS / "smoke" / "l2p.yaml")
    assert by_name == by_path and by_name.method.name == "l2p" and by_name.data.name == "synthetic"
    assert load_config("cifar100_norga", ["seed=3"]).seed == 3


def test_an_existing_file_wins_over_a_shipped_name(installed):
    Path("smoke").write_text("seed: 7\n")
    assert config_file("smoke") == Path("smoke") and load_config("smoke").seed == 7
    assert load_config("smoke.yaml").seed == load_config(CONFIGS / "smoke.yaml").seed != 7
    Path("cifar100_norga").mkdir()  # a folder is no file: the shipped config
    assert config_file("cifar100_norga") == installed.resolve() / "cifar100_norga.yaml"


@pytest.mark.parametrize("given, near", [("smok", "smoke"), ("l2p", "smoke/l2p"), ("cifar100_norg", "cifar100_norga")])
def test_an_unknown_name_is_one_error_with_close_matches(installed, given, near):
    with pytest.raises(ConfigError, match=f"config file not found: {given} .*close matches: .*{near}") as err:
        load_config(given)
    assert "\n" not in str(err.value)
    for bad in ("../smoke", "/smoke", "configs/../smoke.yaml", "smoke//l2p"):
        with pytest.raises(ConfigError, match="config file not found"):
            config_file(bad)


def test_norga_configs_lists_every_shipped_config_with_a_description(installed, capsys):
    assert norga(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}
    assert str(installed.resolve()) in lines[0] and len(rows) == len(lines) - 1
    assert sorted(rows) == sorted(p.relative_to(CONFIGS).with_suffix("").as_posix() for p in CONFIGS.rglob("*.yaml"))
    assert all(text.strip() for text in rows.values())
    assert rows["smoke"] == description(CONFIGS / "smoke.yaml")


def test_description_is_the_description_key_else_the_leading_comment(tmp_path):
    keyed = tmp_path / "a.yaml"
    keyed.write_text("# A comment. Not this.\ndescription: the  key\nseed: 1\n")
    commented = tmp_path / "b.yaml"
    commented.write_text("# First sentence of\n# the comment. Second one.\nseed: 1  # not this\n")
    bare = tmp_path / "c.yaml"
    bare.write_text("seed: 1\n")
    assert [description(p) for p in (keyed, commented, bare)] == ["the key", "First sentence of the comment.", ""]
    long = tmp_path / "d.yaml"
    long.write_text("# " + "word " * 60 + "\n")
    assert len(description(long)) <= 110 and description(long).endswith("...")


def test_norga_configs_show_prints_the_file(installed, capsys):
    assert norga(["configs", "show", "smoke/l2p"]) == 0
    assert capsys.readouterr().out == (CONFIGS / "smoke" / "l2p.yaml").read_text()
    assert norga(["configs", "show", "smoke/l2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "smoke/l2p" in err


def test_norga_configs_copy_writes_a_config_that_reads_as_the_shipped_one(installed, tmp_path, capsys):
    for name in _one_per_folder_with_a_base() + ["cifar100_coda_official"]:  # a chain of three files
        folder = tmp_path / "copies" / name.replace("/", "__")
        written = copy_config(name, folder)
        assert written[0] == folder / f"{name.rsplit('/', 1)[-1]}.yaml" and all(p.parent == folder for p in written)
        assert read_config_file(written[0]) == read_config_file(installed / f"{name}.yaml"), name
    mine = tmp_path / "mine"
    assert norga(["configs", "copy", "smoke/l2p", str(mine)]) == 0
    assert sorted(p.name for p in mine.iterdir()) == [".norga-written.json", "l2p.yaml", "smoke.yaml"]
    assert load_config(mine / "l2p.yaml") == load_config("smoke/l2p")
    (mine / "l2p.yaml").write_text("# edited\nbase: smoke.yaml\nseed: 5\n")
    capsys.readouterr()
    for extra in ([], ["--force"]):  # an edited copy is never replaced, not even with --force
        assert norga(["configs", "copy", "smoke/l2p", str(mine), *extra]) == 2
        assert "edited since" in capsys.readouterr().err and load_config(mine / "l2p.yaml").seed == 5
    (mine / "l2p.yaml").unlink()
    assert norga(["configs", "copy", "smoke/l2p", str(mine)]) == 2  # smoke.yaml: the earlier, unedited copy
    assert "--force" in capsys.readouterr().err
    assert norga(["configs", "copy", "smoke/l2p", str(mine), "--force"]) == 0
    assert load_config(mine / "l2p.yaml") == load_config("smoke/l2p")


def test_reproduce_reads_the_shipped_manifest_by_default(installed, tmp_path):
    assert manifest_file(None) == installed.resolve() / "reproduce" / "paper.yaml"
    assert manifest_file(None, quick=True) == installed.resolve() / "reproduce" / "quick_gpu.yaml"
    cells = [c for c in load_manifest(manifest_file(None)).cells if c.runnable]
    assert cells and all(c.config_path.parent == installed.resolve() for c in cells)
    assert manifest_file("reproduce/quick_gpu") == manifest_file(None, quick=True)
    own = tmp_path / "mine.yaml"  # another manifest: its config may name a shipped config
    own.write_text("cells:\n  - {id: a, table: 1, benchmark: b, backbone: c, method: d, config: smoke/l2p}\n")
    assert manifest_file(str(own)) == own
    assert load_manifest(own).cells[0].config_path == installed.resolve() / "smoke" / "l2p.yaml"
    with pytest.raises(ManifestError, match="manifest not found: nope"):
        manifest_file("nope")


def _one_per_folder_with_a_base() -> list:
    """Per folder of the shipped configs, the first config with a base: (the base line is what a copy rewrites)."""
    chosen = {}
    for name in shipped_names():
        folder = name.rpartition("/")[0]
        if folder not in chosen and "\nbase:" in "\n" + (CONFIGS / f"{name}.yaml").read_text():
            chosen[folder] = name
    return sorted(chosen.values())
