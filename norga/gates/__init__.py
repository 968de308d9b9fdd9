"""The prefix gates, in one place (as timm's ``layers`` hold its registries of building blocks beside its models).

* :mod:`norga.gates.schema` — torch-free: every gate's option dataclass (registered by name) and the
  ``method.gate`` config section, checked once when a config is read;
* :mod:`norga.gates.modules` — the gate modules (``linear``, ``norga``, ``norga_headwise``), their registry
  :data:`~norga.gates.modules.GATES` and the :class:`~norga.gates.modules.GateFactory` the prompted blocks receive.

Importing this package imports no torch.
"""
