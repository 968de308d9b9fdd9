"""The speed report against the NoRGa authors' code (README.md): ``report`` runs both pipelines, ``stage_timer``
splits their wall time into stages, ``tables`` renders bench/results/speed_report.md.
"""
