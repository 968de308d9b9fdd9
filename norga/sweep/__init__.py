"""Sweeps: a grid of ``norga train`` runs (points x seeds) from a sweep file, launched on this machine or on a
cluster, with their status read from the run folders (docs/sweeps.md).

Layers: below ``norga.commands`` (``norga sweep``: commands/sweep_command.py) and ``norga.reproduce`` (whose runs are
the points of a sweep over the manifest), above the engine; torch-free (every run is a ``norga train`` process).

* :mod:`.spec` — the sweep file; :mod:`.points` — a point's name, overrides, folder and command line;
* :mod:`.status` — done / partial / failed / missing of a run folder; :mod:`.root` — ``ROOT/sweep.json``, logs;
* :mod:`.launchers` — ``launch(commands, launcher, jobs, log_dir)``: ``local`` (standard library), and through
  submitit (:mod:`.submitit_launch`, ``pip install norga[cluster]``) ``slurm`` and ``submitit-local``; the registry,
  :class:`~.launch_base.Outcome` and :class:`~.launch_base.LaunchError` in :mod:`.launch_base`;
* :mod:`.run` — launch what is not done; :mod:`.records` — a command's exit record.
"""
