"""The method toolkit: what methods are built from, below the methods and the engine.

The shared training loop (:mod:`~norga.toolkit.training`) and HiDe-Prompt's stages built on it
(:mod:`~norga.toolkit.stages`), the output heads, per-class Gaussian statistics, test-feature
caches, learning-rate schedules, seeding per (seed, task, stage), data parallelism under
torchrun, devices, the per-epoch log and MoE route statistics. Nothing here imports a method or
the engine (``tests/test_layers.py`` keeps it so).
"""
