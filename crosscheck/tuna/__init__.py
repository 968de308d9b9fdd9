"""The cross-check of TUNA against the authors' code (the fork Ngahoang2005/ICCV2025-TUNA).

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('tuna',)  # the registered norga methods this folder checks
