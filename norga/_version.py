"""The package version, in its own module: ``from norga._version import __version__`` works even where a folder
named ``norga`` (e.g. a checkout) shadows the package's ``__init__`` as a namespace package."""
__version__ = "0.2.0"
