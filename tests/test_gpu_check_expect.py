"""What the GPU check expects of each method's smoke FA against its CPU run (bench/gpu_check_expect.py)."""
from __future__ import annotations

import pytest

from bench.gpu_check_expect import ARITHMETIC, ARITHMETIC_BAND, DEVICE_DRAWS, SAMPLING, expectation, judge
from bench.gpu_check_report import smoke_lines
from norga.config import method_configs


def test_every_registered_method_is_classified_once():
    classes = [set(SAMPLING), set(DEVICE_DRAWS), set(ARITHMETIC)]
    assert set().union(*classes) == set(method_configs()), "classify every registered method"
    assert sum(len(c) for c in classes) == len(set().union(*classes)), "a method in two classes"
    with pytest.raises(KeyError, match="not classified"):
        expectation("a_new_method")


def test_arithmetic_methods_are_judged_within_one_test_image():
    assert judge("l2p", 0.9722, 1.0, "off")["within"] is True  # one of 36 images flipped
    assert judge("l2p", 0.9444, 1.0, "off")["within"] is False  # two
    assert judge("l2p", 0.9444, 1.0, "bf16")["within"] is True
    assert ARITHMETIC_BAND["bf16"] == 2 * ARITHMETIC_BAND["off"]


def test_methods_drawing_another_sample_on_cuda_are_reported_not_judged():
    for method in ("norga", "sd_lora"):
        got = judge(method, 0.5, 1.0, "off")
        assert got["within"] is None and got["diff_points"] == -50.0 and got["kind"] != "arithmetic"
    assert judge("l2p", 0.5, None, "off")["within"] is None  # no CPU reference: nothing to judge


def test_the_report_names_the_expectation_and_an_outside_band_run():
    runs = {"l2p/off": {"FA": 0.9, "cpu_FA": 1.0, "seconds": 1.0, "expect": judge("l2p", 0.9, 1.0, "off")},
            "norga/off": {"FA": 0.9, "cpu_FA": 1.0, "seconds": 1.0, "expect": judge("norga", 0.9, 1.0, "off")}}
    text = "\n".join(smoke_lines({"smoke": {"result": {"runs": runs}}}))
    assert "| l2p | fp32 | 0.900 | 1.000 | arithmetic | -10.00 (≤ 2.78) OUTSIDE |" in text
    assert "| norga | fp32 | 0.900 | 1.000 | sampling | -10.00 (not judged) |" in text
