"""How each method's smoke FA on CUDA is expected to compare with its CPU run, and why (docs/gpus.md, "CPU and
CUDA numbers"). Nothing has run on a GPU: the classes below come from reading the code, not from measurements.

* ``sampling``: the method trains heads on Gaussian pseudo-features (TAP, TII or classifier alignment), which on
  a GPU are drawn from a CUDA generator seeded by one draw of the stage's CPU generator
  (:func:`norga.toolkit.gaussian.draw_generator`): the GPU run sees another random sample than the CPU run and
  differs from it as two seeds do. Reported, not judged (the small task judges NoRGa on more data).
* ``device_draws``: the method draws an initialisation or dropout masks on the run's device (CUDA's generator,
  not the CPU's): likewise another random sample. Reported, not judged.
* ``arithmetic``: every random draw comes from a CPU generator, so the GPU run differs from the CPU run only by
  floating-point arithmetic (cuDNN's TF32 for the "fp32" patch-embedding convolution, about 1e-3 relative;
  atomic adds in backward passes). Judged: the smoke FA may differ by at most :data:`ARITHMETIC_BAND` points
  (one test image of the smoke configs' 36 in fp32, two in bf16: a prediction near a tie may flip).
"""
from __future__ import annotations

from typing import Dict, Optional

# methods whose heads are trained on Gaussian pseudo-features (GaussianStore.sample through draw_generator)
SAMPLING = {"norga": "TAP and TII alignment", "hideprompt": "TAP and TII alignment",
            "hidelora": "TAP and TII alignment", "mos": "classifier alignment", "lora_moe": "classifier alignment",
            "mh_moe": "classifier alignment", "tuna": "classifier alignment", "slca": "classifier alignment"}
# methods that draw an initialisation or dropout masks on the run's device
DEVICE_DRAWS = {"sd_lora": "the LoRA components' initialisation", "aper": "adapter dropout",
                "ease": "adapter dropout"}
# every random draw from a CPU generator (prompts and heads drawn on the CPU, then moved)
ARITHMETIC = {"l2p", "dualprompt", "coda", "sprompt", "simplecil", "ranpac", "inflora"}
ARITHMETIC_BAND = {"off": 100.0 / 36, "bf16": 2 * 100.0 / 36}  # points of FA: one (two) of 36 test images


def expectation(method: str) -> Dict[str, str]:
    """``{"kind": sampling | device_draws | arithmetic, "why": ...}`` of a registered method."""
    if method in SAMPLING:
        return {"kind": "sampling", "why": f"{SAMPLING[method]} on CUDA-generator pseudo-features"}
    if method in DEVICE_DRAWS:
        return {"kind": "device_draws", "why": f"{DEVICE_DRAWS[method]} from the CUDA generator"}
    if method in ARITHMETIC:
        return {"kind": "arithmetic", "why": "CPU-generator draws only; TF32 convolution and atomic adds"}
    raise KeyError(f"{method}: not classified in bench/gpu_check_expect.py (SAMPLING, DEVICE_DRAWS or ARITHMETIC)")


def judge(method: str, fa: float, cpu_fa: Optional[float], amp: str) -> dict:
    """The comparison of a smoke run's FA (fraction) with its CPU FA: the difference in points, the band and
    ``within`` (None when not judged: no CPU reference, or a method whose GPU run draws another sample)."""
    expected = expectation(method)
    if cpu_fa is None:
        return {**expected, "diff_points": None, "band_points": None, "within": None}
    diff = round((fa - cpu_fa) * 100, 2)
    if expected["kind"] != "arithmetic":
        return {**expected, "diff_points": diff, "band_points": None, "within": None}
    band = round(ARITHMETIC_BAND[amp], 2)
    return {**expected, "diff_points": diff, "band_points": band, "within": abs(diff) <= band}
