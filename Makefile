# The two commands of the README: `make demo` runs the main job on the smoke config, `make test` runs the tests.
# Both create a local virtual environment (.venv) with what they need on first use. On a CPU-only machine
# `make demo CPU=1` (= `make cpu-demo`) first installs torch and torchvision from PyTorch's CPU index, so pip does
# not fetch PyPI's CUDA wheels (several GB, never used); without CPU=1 nothing changes (what CI installs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CPU ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: demo cpu-demo test fast docs clean

$(BIN)/norga: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(CPU),$(BIN)/python -m pip install --quiet torch torchvision --index-url $(TORCH_CPU_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: $(BIN)/norga  ## the main job on the embedded default: the smoke config (tiny ViT, synthetic data, 3 tasks)
	$(BIN)/norga train --config configs/smoke.yaml --output-dir runs/smoke

cpu-demo:  ## make demo on a CPU-only machine (CPU builds of torch and torchvision in a new .venv)
	$(MAKE) demo CPU=1

test: $(BIN)/norga  ## what CI runs (.ci/run): every test, fault matrices included, one pytest-xdist worker per core
	$(BIN)/python -m pytest -q -n auto --dist loadscope

fast: $(BIN)/norga  ## the fast loop while editing (no training runs, no killed processes)
	$(BIN)/python -m pytest -q -m "not slow and not integration"

docs: $(BIN)/norga  ## the docs site, strictly (broken links fail), into site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) site
