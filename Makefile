# The two commands: `make demo` (set up, then run the main job) and `make test` (set up, lint, test).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint setup setup-dev bench clean

demo: setup
	$(BIN)/rig calibrate
	$(BIN)/rig run experiments/scripted_smoke.toml

test: setup-dev lint
	$(BIN)/python -m pytest

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(VENV)/.installed $@

bench: setup
	$(BIN)/python bench/bench_calibrate.py
	$(BIN)/python bench/bench_run_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
