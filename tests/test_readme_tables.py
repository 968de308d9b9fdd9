"""bench/readme_tables.py: marked README tables regenerated from benchmark rows, checked by hand."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from bench import readme_tables  # noqa: E402
from bench.table_blocks import typographic  # noqa: E402

T2 = 4.302653  # t_{0.975} with 2 degrees of freedom


def _rows():
    """lora_moe and mh_moe over seeds 1-3; FA / BWT / FM as fractions, as the benchmark stores them."""
    rows = []
    for seed, (fa_l, fa_m) in enumerate(((0.40, 0.30), (0.45, 0.38), (0.42, 0.36)), start=1):
        for arm, fa in (("lora_moe", fa_l), ("mh_moe", fa_m)):
            rows.append({"run": arm, "seed": seed, "FA": fa, "CA": fa, "TIL_FA": fa, "BWT": -0.5, "FM": 0.5,
                         "n_eff_route": 3.0, "n_eff_path": 3.0, "dL_hi_lo": 0.0})
    return rows


TEXT = """# Results
Prose that stays.
<!-- bench:moe-pairs -->
| stale | table |
<!-- /bench:moe-pairs -->
between
<!-- bench:headwise-arms -->
<!-- /bench:headwise-arms -->
end
"""


def _block(text: str, name: str) -> str:
    return text.split(f"<!-- bench:{name} -->\n", 1)[1].split(f"<!-- /bench:{name} -->", 1)[0]


def test_render_rewrites_only_the_marked_tables_with_numbers_by_hand():
    out = readme_tables.render(TEXT, _rows())
    assert out.startswith("# Results\nProse that stays.\n<!-- bench:moe-pairs -->\n") and "\nbetween\n" in out
    assert out.endswith("<!-- /bench:headwise-arms -->\nend\n")
    lines = _block(out, "moe-pairs").splitlines()
    assert lines[0].startswith("| difference | seeds | FA | BWT |") and lines[1].startswith("|---|---|")
    d = np.array([-10.0, -7.0, -6.0])  # mh_moe − lora_moe FA in points
    half = T2 * d.std(ddof=1) / math.sqrt(3)
    fa = f"{d.mean():+.2f} [{d.mean() - half:+.2f}, {d.mean() + half:+.2f}]".replace("-", "−")
    assert lines[2].startswith(f"| mh_moe − lora_moe | 3 | {fa} *resolved* | ")
    assert d.mean() + half < 0  # the interval excludes 0, so *resolved* is right
    assert len(lines) == 3  # lora_moe_k16_top5 has no rows: no line for its pair
    assert _block(out, "headwise-arms") == ("*No rows yet for `headwise-arms`: run `python -m bench.real_data_cpu "
                                            "--only norga_headwise norga_tanh hideprompt`.*\n")  # said, not empty
    assert readme_tables.render(out, _rows()) == out


def test_stale_blocks_names_each_table_that_differs():
    assert readme_tables.stale_blocks(TEXT, _rows()) == ["moe-pairs", "headwise-arms"]
    fresh = readme_tables.render(TEXT, _rows())
    assert readme_tables.stale_blocks(fresh, _rows()) == []
    changed = _rows()
    changed[0]["FA"] = 0.41
    assert readme_tables.stale_blocks(fresh, changed) == ["moe-pairs"]


def test_typographic_minus_only_before_digits():
    line = "| mh_moe_h8 − mh_moe_h2 | 3 | -0.50 [-1.20, +0.20] | –"
    assert typographic(line) == "| mh_moe_h8 − mh_moe_h2 | 3 | −0.50 [−1.20, +0.20] | –"
    assert typographic("|---|---|") == "|---|---|"
    assert typographic("added 2026-11-27; task 0..T-1") == "added 2026-11-27; task 0..T−1"  # a date keeps its hyphens
    assert typographic("CIFAR-100, top-1, ViT-S/14 at -2.5") == "CIFAR-100, top-1, ViT-S/14 at −2.5"  # names


@pytest.mark.parametrize("text, message", [
    ("<!-- bench:nope -->\n<!-- /bench:nope -->\n", "unknown table"),
    ("<!-- bench:moe-arms -->\n| x |\n", "do not pair up"),
    ("<!-- bench:moe-arms -->\n<!-- /bench:headwise-arms -->\n", "do not pair up"),
])
def test_bad_markers_raise_one_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        readme_tables.render(text, _rows())


def test_main_check_fails_on_a_stale_readme_and_passes_after_a_rewrite(tmp_path, capsys):
    import json

    readme, results = tmp_path / "README.md", tmp_path / "rows"
    readme.write_text(TEXT)
    results.with_suffix(".json").write_text(json.dumps(_rows()))
    args = ["--files", str(readme), "--results", str(results)]
    assert readme_tables.main(args + ["--check"]) == 1
    assert "['moe-pairs', 'headwise-arms']" in capsys.readouterr().err
    assert readme_tables.main(args) == 0 and readme_tables.main(args + ["--check"]) == 0
    with pytest.raises(SystemExit, match="no rows"):
        readme_tables.main(["--files", str(readme), "--results", str(tmp_path / "none")])


def _baseline_rows(seeds=(1, 2, 3)):
    """simplecil and the four prompt baselines; FA and TIL_FA offsets from simplecil in points, per seed."""
    offsets = {"sprompt": ([5, 6, 7], [-1, 0, 1]), "l2p": ([-5, -6, -7], [3, 4, 5]),
               "dualprompt": ([-1, 0, 1], [-3, -4, -5]), "coda": ([-2, 0, 3], [3, 4, 5])}
    rows = [{"run": "simplecil", "seed": s, "FA": 0.5, "CA": 0.5, "FM": 0.1, "TIL_FA": 0.6} for s in seeds]
    for arm, (fa, til) in offsets.items():
        rows += [{"run": arm, "seed": s, "FA": 0.5 + fa[i] / 100, "CA": 0.5, "FM": 0.1, "TIL_FA": 0.6 + til[i] / 100}
                 for i, s in enumerate(seeds)]
    return rows


def test_the_simplecil_verdict_sorts_each_baseline_by_its_interval():
    text = "<!-- bench:baselines-simplecil-verdict -->\n<!-- /bench:baselines-simplecil-verdict -->\n"
    line = _block(readme_tables.render(text, _baseline_rows()), "baselines-simplecil-verdict")
    assert ("in FA above `sprompt`; level `dualprompt`, `coda`; below `l2p`; given the task (TIL FA) above `l2p`, "
            "`coda`; level `sprompt`; below `dualprompt` (") in line
    one_seed = _block(readme_tables.render(text, _baseline_rows(seeds=(1,))), "baselines-simplecil-verdict")
    assert one_seed.startswith("*No rows yet for `baselines-simplecil-verdict`")  # no interval from one seed


def test_the_newer_baselines_verdict_sorts_each_arm_against_both_references():
    """FA/TIL_FA offsets in points per seed; no_prompt sits 3 FA points above norga_tanh on every seed."""
    offsets = {"ranpac": [3, 4, 5], "aper": [-5, -6, -7], "ease": [-1, 0, 1], "inflora": [-2, 0, 3],
               "sd_lora": [1, 2, 3]}
    rows = [{"run": "no_prompt", "seed": s, "FA": 0.5, "CA": 0.5, "FM": 0.1, "TIL_FA": 0.6} for s in (1, 2, 3)]
    rows += [dict(r, run="norga_tanh", FA=0.47) for r in rows]
    for arm, fa in offsets.items():  # TIL_FA offsets are the FA ones with the sign flipped
        rows += [{"run": arm, "seed": s, "FA": 0.5 + fa[i] / 100, "CA": 0.5, "FM": 0.1, "TIL_FA": 0.6 - fa[i] / 100}
                 for i, s in enumerate((1, 2, 3))]
    text = "<!-- bench:newer-baselines-verdict -->\n<!-- /bench:newer-baselines-verdict -->\n"
    lines = _block(readme_tables.render(text, rows), "newer-baselines-verdict").splitlines()
    # sd_lora's +1, +2, +3: mean 2, 95% t half-width 4.303 · 1 / √3 = 2.48, so level with no_prompt
    assert lines[0] == ("Against `no_prompt` the newer baselines are in FA above `ranpac`; level `ease`, `inflora`, "
                        "`sd_lora`; below `aper`; given the task (TIL FA) above `aper`; level `ease`, `inflora`, "
                        "`sd_lora`; below `ranpac`.")
    assert lines[1].startswith("Against `norga_tanh` the newer baselines are in FA above `ranpac`, `ease`, `sd_lora`; "
                               "level `inflora`; below `aper`; ")
    without_one = _block(readme_tables.render(text, [r for r in rows if not (r["run"] == "inflora" and r["seed"] > 1)]),
                         "newer-baselines-verdict").splitlines()  # one seed of inflora: no interval
    assert without_one[0] == lines[0].replace(", `inflora`, ", ", ")
    assert "`inflora`" not in without_one[1] and without_one[2].endswith(
        "Not yet in these sentences (fewer than 2 seeds): `inflora`.")
    only_one_seed = [r for r in rows if r["seed"] == 1]
    assert _block(readme_tables.render(text, only_one_seed), "newer-baselines-verdict").startswith("*No rows yet")


def test_a_file_block_shows_the_committed_file_without_its_title(tmp_path, monkeypatch):
    from bench import table_blocks

    monkeypatch.setattr(table_blocks, "REPO", tmp_path)
    (tmp_path / "report.md").write_text("# Title\n\nGenerated by x.\n\n| a | b |\n|---|---|\n| -1.5 | 2 |\n")
    page = "intro\n<!-- bench:file:report.md -->\nold\n<!-- /bench:file:report.md -->\nend\n"
    fresh = readme_tables.render(page, [])
    assert fresh == ("intro\n<!-- bench:file:report.md -->\nGenerated by x.\n\n| a | b |\n|---|---|\n| −1.5 | 2 |\n"
                     "<!-- /bench:file:report.md -->\nend\n")
    assert readme_tables.stale_blocks(page, []) == ["file:report.md"] and readme_tables.stale_blocks(fresh, []) == []
    with pytest.raises(ValueError, match="missing.md does not exist; run the generator that writes it"):
        readme_tables.render(page.replace("report.md", "missing.md"), [])
