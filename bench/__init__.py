"""Benchmarks of norga, run as modules from the repository root: python -m bench.<name> (see each module)."""
