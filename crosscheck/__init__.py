"""The cross-checks against reference code, one folder per checked method (``crosscheck/<method>/``: its
norga side, its reference side, its whole-run scripts and its README.md with the evidence) and the shared harness
(``crosscheck/harness/``) and speed report (``crosscheck/speed/``). Outside the norga package and not in the wheel;
it may import ``norga`` and ``bench``, nothing imports it. docs/crosscheck.md is the index.
"""
