# The two commands of the README: `make demo` runs the main job on the smoke config, `make test` runs the tests.
# Both create a local virtual environment (.venv) with what they need on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test fast docs clean

$(BIN)/norga: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: $(BIN)/norga  ## the main job on the embedded default: the smoke config (tiny ViT, synthetic data, 3 tasks)
	$(BIN)/norga train --config configs/smoke.yaml --output-dir runs/smoke

test: $(BIN)/norga  ## what CI runs (.ci/run): every test, fault matrices included, one pytest-xdist worker per core
	$(BIN)/python -m pytest -q -n auto --dist loadscope

fast: $(BIN)/norga  ## the fast loop while editing (no training runs, no killed processes)
	$(BIN)/python -m pytest -q -m "not slow and not integration"

docs: $(BIN)/norga  ## the docs site, strictly (broken links fail), into site/
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) site
