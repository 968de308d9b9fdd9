"""norga: NoRGa (non-linear residual gates) prefix prompts for continual learning on timm ViTs."""

__version__ = "0.2.0"
