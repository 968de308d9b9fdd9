"""What NoRGa's non-linear residual gate changes for parameter estimation (issues 7 and 20).

Paper: "Mixture of Experts Meets Prompt-Based Continual Learning", Section 4.2
(Thm 4.1; Def. 4.2; Thm 4.3: non-linear residual gate -> Voronoi loss eq. 17 ~ n^-1/2)
and Appendix A (Thm A.1: linear gate, experts (a^T X + b)^p -> slower than any
polynomial rate). Three parts, each in its own module:

* ``identifiability`` (E1, ``gating_rates_identifiability``; deterministic):
  ||g_G - g_G*|| along four families of measures near one true atom (Thm A.1's
  construction, rescaling, pure beta-split, the "PDE direction"), Definition 4.2's
  linear independence and the linear-gate identity d2F/(dbeta db) = dF/da, for
  gates {linear, tanh, sigmoid} x experts {affine, (.)^2, ReLU, GELU}; and
  omega(eps)/eps for eq. 17 with GELU experts (``gating_rates_omega``).
* ``two_point`` (E2, ``gating_rates_twopoint``): Le Cam two-point test along the
  PDE direction with affine experts, delta_n = kappa n^-1/4: power of the exact
  likelihood-ratio test by Monte Carlo and in closed form.
* ``least_squares`` (E3, ``gating_rates_ls``): least-squares fits with L' = L + 1
  atoms for GELU experts (both gates identifiable) and affine experts (Thm A.1's
  non-identifiability), losses vs n.

Run ``python -m theory.gating_rates.experiments [--quick] --out DIR``; it writes
``DIR/results.json`` (``{"identifiability": ..., "two_point": ...,
"least_squares": {"<expert>": {"<gate>": ...}}, "seconds": {...}}``),
``DIR/setup.json`` and ``DIR/rates.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

from theory.gating_rates.identifiability import IdentConfig, run_identifiability
from theory.gating_rates.ls import (DEFAULT_NS, METRICS, QUICK_NS, Config,  # noqa: F401
                                    multistart_fit, run_least_squares, simulate_one_n)
from theory.gating_rates.model import EXPERTS, GATE_NAMES
from theory.gating_rates.twopoint import TwoPointConfig, run_two_point

PARTS = ("identifiability", "two_point", "least_squares")
LS_EXPERTS = ("gelu", "affine")


@dataclass
class Suite:
    """Which parts run, and each part's config (all saved to ``setup.json``)."""

    parts: Sequence[str] = PARTS
    ls: Config = field(default_factory=Config)
    ls_experts: Sequence[str] = LS_EXPERTS
    ident: IdentConfig = field(default_factory=IdentConfig)
    two_point: TwoPointConfig = field(default_factory=TwoPointConfig)

    @classmethod
    def quick(cls, **kw) -> "Suite":
        """Tiny version of every part (mechanics only)."""
        base = dict(ls=Config.quick(gates=("linear", "tanh")), ident=IdentConfig.quick(),
                    two_point=TwoPointConfig.quick())
        base.update(kw)
        return cls(**base)


def run(suite: Suite, out_dir: Path, log=print) -> Dict[str, object]:
    """Run the selected parts; write results.json / setup.json / rates.png; return the results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: Dict[str, object] = {"seconds": {}}
    t_all = time.time()
    if "identifiability" in suite.parts:
        t = time.time()
        results["identifiability"] = run_identifiability(suite.ident, log)
        results["seconds"]["identifiability"] = time.time() - t
    if "two_point" in suite.parts:
        t = time.time()
        results["two_point"] = run_two_point(suite.two_point, log)
        results["seconds"]["two_point"] = time.time() - t
    if "least_squares" in suite.parts:
        results["least_squares"] = {}
        for expert in suite.ls_experts:
            t = time.time()
            cfg = dataclasses.replace(suite.ls, expert=expert)
            results["least_squares"][expert] = run_least_squares(cfg, log)
            results["seconds"][f"least_squares_{expert}"] = time.time() - t
    results["seconds"]["total"] = time.time() - t_all
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    setup = {"suite": asdict(suite), "torch_threads": torch.get_num_threads(),
             "seconds": results["seconds"]}
    if "least_squares" in suite.parts:
        spec = suite.ls.spec()
        setup.update({"ls_theta_star_[beta0,beta1,a,b]": spec.theta_star.tolist(), "B0": spec.B0.tolist(),
                      "c0": spec.c0.tolist(), "a0": spec.a0.tolist(), "b0": spec.b0.tolist(),
                      "box_lo": suite.ls.box()[0].tolist(), "box_hi": suite.ls.box()[1].tolist()})
    (out_dir / "setup.json").write_text(json.dumps(setup, indent=1))
    from theory.gating_rates.plot import plot_all, slope_table
    plot_all(results, out_dir / "rates.png")
    for expert, res in results.get("least_squares", {}).items():
        log(f"[{expert} experts] slopes of per-n means [95% bootstrap CI]:\n" + slope_table(res))
    log(f"total {results['seconds']['total']:.1f}s -> {out_dir}")
    return results


def _comma_list(text: str, allowed: Sequence[str], flag: str, p: argparse.ArgumentParser) -> List[str]:
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        p.error(f"{flag}: unknown value(s) {bad}; choose from {list(allowed)}")
    return vals


def _numbers(text: str, kind, flag: str, p: argparse.ArgumentParser, minimum) -> list:
    try:
        vals = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        p.error(f"{flag} must be comma-separated {'integers' if kind is int else 'numbers'}, got {text!r}")
    if not vals or min(vals) < minimum:
        p.error(f"{flag} needs values >= {minimum}, got {text!r}")
    return vals


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and validate the CLI; bad input exits with status 2 and a clear message."""
    p = argparse.ArgumentParser(prog="python -m theory.gating_rates.experiments",
                                description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory (created)")
    p.add_argument("--quick", action="store_true", help="tiny version of every part (smoke tests, ~30 s)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list from {PARTS}")
    p.add_argument("--gates", default=None,
                   help=f"least squares: comma list from {GATE_NAMES} (default all; --quick: linear,tanh)")
    p.add_argument("--experts", default=",".join(LS_EXPERTS), help=f"least squares: comma list from {EXPERTS}")
    p.add_argument("--ns", default=None, help="least squares: comma list of sample sizes (>= 20)")
    p.add_argument("--reps", type=int, default=None, help="least squares: replications per n (>= 2)")
    p.add_argument("--restarts", type=int, default=None, help="least squares: fit restarts per replication")
    p.add_argument("--mc-reps", type=int, default=None, help="two-point: Monte Carlo replications per n")
    p.add_argument("--kappas", default=None, help="two-point: comma list of kappa (delta_n = kappa n^-1/4)")
    p.add_argument("--omega-starts", type=int, default=None, help="identifiability: starts per omega(eps)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.parts = _comma_list(args.parts, PARTS, "--parts", p)
    if args.gates is not None:
        args.gates = _comma_list(args.gates, GATE_NAMES, "--gates", p)
    args.experts = _comma_list(args.experts, EXPERTS, "--experts", p)
    if args.ns is not None:
        args.ns = _numbers(args.ns, int, "--ns", p, 20)
        if len(args.ns) < 2:
            p.error("--ns needs at least two sample sizes to fit a slope")
    if args.kappas is not None:
        args.kappas = _numbers(args.kappas, float, "--kappas", p, 1e-12)
    for name in ("restarts", "mc_reps", "omega_starts"):
        val = getattr(args, name)
        if val is not None and val < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {val}")
    if args.reps is not None and args.reps < 2:
        p.error("--reps must be >= 2 (bootstrap intervals resample replications)")
    return args


def suite_from_args(args: argparse.Namespace) -> Suite:
    """Build the :class:`Suite` a parsed command line asks for."""
    suite = Suite.quick() if args.quick else Suite()
    ls_over = {"seed": args.seed}
    if args.gates is not None:
        ls_over["gates"] = tuple(args.gates)
    for name in ("ns", "reps", "restarts"):
        if getattr(args, name) is not None:
            ls_over[name] = tuple(args.ns) if name == "ns" else getattr(args, name)
    tp_over = {"seed": args.seed}
    if args.mc_reps is not None:
        tp_over["reps"] = args.mc_reps
    if args.kappas is not None:
        tp_over["kappas"] = tuple(args.kappas)
    id_over = {"seed": args.seed}
    if args.omega_starts is not None:
        id_over["omega_starts"] = args.omega_starts
    return dataclasses.replace(suite, parts=tuple(args.parts), ls_experts=tuple(args.experts),
                               ls=dataclasses.replace(suite.ls, **ls_over),
                               two_point=dataclasses.replace(suite.two_point, **tp_over),
                               ident=dataclasses.replace(suite.ident, **id_over))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; torch runs single-threaded."""
    torch.set_num_threads(1)
    args = parse_args(argv)
    run(suite_from_args(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
