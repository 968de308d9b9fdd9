"""The cross-check of SD-LoRA against WuYichen-97/SD-Lora-CL (its evidence on InfLoRA's page).

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('sd_lora',)  # the registered norga methods this folder checks
