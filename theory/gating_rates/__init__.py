"""What NoRGa's non-linear residual gate changes for parameter estimation (paper Section 4.2).

``python -m theory.gating_rates.experiments`` runs the experiments E1 (identifiability:
:mod:`.identifiability`, :mod:`.paths`, :mod:`.omega`), E2 (two-point test: :mod:`.twopoint`)
and E3 (least squares: :mod:`.ls`) on the prefix-MoE regression model (:mod:`.model`), with
fits (:mod:`.fit`), Voronoi losses (:mod:`.loss`) and figures (:mod:`.plot`).
"""
