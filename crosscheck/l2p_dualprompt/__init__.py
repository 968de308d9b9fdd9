"""The cross-check of L2P and DualPrompt (and the NoRGa authors' S-Prompt, method ``dualprompt``) against the
NoRGa authors' codebase.

``norga_side`` (norga's venv) writes norga's tensors; ``reference_side`` (the reference's environment) reads them
into the reference code and prints max |reference − norga|; README.md holds the evidence and the commands.
"""
METHODS = ('l2p', 'dualprompt')  # the registered norga methods this folder checks
