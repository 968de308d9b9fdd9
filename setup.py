"""What setup.cfg cannot say: the repository's ``configs/`` folder is installed as the package data ``norga/shipped``.

Every other setting is in setup.cfg. ``package_dir`` maps the package ``norga.shipped`` onto ``configs/`` (the one
copy of the shipped configs), so a wheel, an sdist and ``pip install -e .`` all carry them; norga reads them with
``importlib.resources`` (:mod:`norga.config.shipped`).
"""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["norga", "norga.*"]), "norga.shipped"],
      package_dir={"norga.shipped": "configs"})
