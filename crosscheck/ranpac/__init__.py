"""The cross-check of RanPAC against RanPAC/RanPAC (with APER and EASE: one harness, one page).

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('ranpac',)  # the registered norga methods this folder checks
