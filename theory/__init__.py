"""Small numerical checks of theory papers behind norga (not used by the training pipeline).

Beside ``norga/``, not inside it: not in the wheel, and nothing in ``norga`` imports it. It imports ``norga``
(the real gates), so run its commands from the repository root, e.g. ``python -m theory.moe_cl.figures``
(docs/theory.md).
"""
