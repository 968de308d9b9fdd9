"""The reports of runs: continual-learning metrics, seed statistics, run plots and ``norga summarize``.

Importing this package imports nothing; :mod:`norga.reports.metrics` and :mod:`norga.reports.summary_stats` are
torch- and matplotlib-free."""
