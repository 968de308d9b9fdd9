"""The cross-check of MOS against sun-hailong/AAAI25-MOS.

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('mos',)  # the registered norga methods this folder checks
