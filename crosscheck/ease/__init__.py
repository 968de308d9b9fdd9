"""The cross-check of EASE against sun-hailong/CVPR24-Ease (its evidence on RanPAC's page).

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('ease',)  # the registered norga methods this folder checks
