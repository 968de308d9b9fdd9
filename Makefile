# The two commands of the README: `make demo` runs the main job on the smoke config, `make test` runs the tests.
# Both create a local virtual environment (.venv) with what they need on first use. On a CPU-only machine
# `make demo CPU=1` (= `make cpu-demo`) first installs torch and torchvision from PyTorch's CPU index, so pip does
# not fetch PyPI's CUDA wheels (several GB, never used); without CPU=1 nothing changes (what CI installs).
# Every install is constrained to .ci/pins.txt (PINS), the exact versions CI installs (the smoke figures hold under
# them); a changed pins file re-installs. `make test-latest` runs the suite against the newest releases instead
# (no pins, its own .venv/latest); PINS= on any command drops the pins when that command (re)installs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CPU ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
PINS ?= .ci/pins.txt
LATEST_VENV := .venv/latest

.PHONY: demo cpu-demo test test-latest fast docs clean

$(BIN)/norga: setup.cfg pyproject.toml $(PINS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(CPU),$(BIN)/python -m pip install --quiet torch torchvision --index-url $(TORCH_CPU_INDEX) \
		$(if $(PINS),-c $(PINS)))
	$(BIN)/python -m pip install --quiet -e ".[dev]" $(if $(PINS),-c $(PINS))
	touch $@

demo: $(BIN)/norga  ## the main job on the embedded default: the smoke config (tiny ViT, synthetic data, 3 tasks)
	$(BIN)/norga train --config configs/smoke.yaml --output-dir runs/smoke

cpu-demo:  ## make demo on a CPU-only machine (CPU builds of torch and torchvision in a new .venv)
	$(MAKE) demo CPU=1

test: $(BIN)/norga  ## what CI runs (.ci/run): ruff, then every test (fault matrices included), one xdist worker per core
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n auto --dist loadscope

test-latest:  ## make test against the newest releases of every dependency (no pins), in a fresh .venv/latest
	rm -rf $(LATEST_VENV)
	$(MAKE) test VENV=$(LATEST_VENV) PINS=

fast: $(BIN)/norga  ## the fast loop while editing (no training runs, no killed processes)
	$(BIN)/python -m pytest -q -m "not slow and not integration"

docs: $(BIN)/norga  ## the docs site, strictly (broken links fail), into site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) site

.PHONY: mutants
mutants: $(BIN)/norga  ## before a release: every planted bug (tests/mutants*.py) applied and caught, a worker per core
	$(BIN)/python tests/mutants.py
