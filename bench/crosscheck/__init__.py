"""Feature-equality checks of the baselines against the NoRGa authors' codebase (docs: cross-checks).

``norga_side`` (this package's venv) writes the converted backbone, a real CIFAR-100 batch and norga's L2P and
DualPrompt outputs; ``reference_side`` (run with the reference code's own venv, timm 0.6.7) loads the same
tensors into the reference models and prints the differences. Neither copies reference code: the reference
side imports the reference checkout given with ``--ref``.
"""
