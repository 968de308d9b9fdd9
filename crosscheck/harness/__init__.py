"""What every cross-check shares: the command lines of both sides (``norga_cli``, ``reference_cli``), the inputs
(``norga_inputs``, ``small_task``, ``ci_task``: the CI-sized task), the training-step and lock-step checks of the
prompt methods (``steps_*``, ``lockstep_*``), the shared parts of the adapter and LoRA checks and the seed-run
scoring (``seed_runs``, ``training``) and the docs copies of the READMEs (``pages``). README.md describes them.
"""
