# Two commands on a fresh machine: `make serve` (embedded default) and `make test` (everything).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CPU_ENGINE := .engines/cpu

.PHONY: serve test lint bench engine-cpu setup

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

engine-cpu: $(CPU_ENGINE)/.appliance-engine-ok

$(CPU_ENGINE)/.appliance-engine-ok: build/cpu/requirements.txt build/cpu/install.sh
	bash build/cpu/install.sh $(CPU_ENGINE)

serve: setup engine-cpu
	$(BIN)/appliance serve

test: setup engine-cpu
	$(BIN)/ruff check appliance tui tests
	$(BIN)/ruff format --check appliance tui tests
	$(BIN)/mypy
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check appliance tui tests
	$(BIN)/ruff format --check appliance tui tests
	$(BIN)/mypy

bench: setup engine-cpu
	$(BIN)/python bench/validate_vs_engine.py
