"""The cross-check of HiDe-LoRA against ivcylc/HiDe-PET.

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('hidelora',)  # the registered norga methods this folder checks
