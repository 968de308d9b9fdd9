"""norga: NoRGa (non-linear residual gates) prefix prompts for continual learning on timm ViTs."""

from ._version import __version__  # noqa: F401 - the package version
