"""The SLCA whole runs side by side: ``python -m crosscheck.slca.seeds DIR``, the same as
``python -m crosscheck.harness.seed_runs slca DIR`` (seeds 1993, 1996, 1997).

DIR holds ``ref_slca_s<seed>.json`` (``crosscheck/slca/reference_run.py``) and ``norga_slca_s<seed>/``
(``norga train --config configs/crosscheck/slca.yaml``); both are scored by :mod:`norga.reports.metrics`.
"""
from __future__ import annotations

from crosscheck.harness.seed_runs import main as seed_runs_main


def main(argv=None) -> int:
    return seed_runs_main(argv, method="slca")


if __name__ == "__main__":
    raise SystemExit(main())
