# Two commands on a fresh machine: `make serve` (embedded default) and `make test` (everything).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CPU_ENGINE := .engines/cpu
TTNN_ENGINE := .engines/ttnn
# ttnn publishes wheels for Python 3.10 and 3.12 only; pyenv provides 3.12 here.
PYTHON312 ?= PYENV_VERSION=3.12.1 python3.12


.PHONY: serve test lint bench soak engine-cpu engine-ttnn setup

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

engine-cpu: $(CPU_ENGINE)/.appliance-engine-ok

$(CPU_ENGINE)/.appliance-engine-ok: build/cpu/requirements.txt build/cpu/requirements.lock build/cpu/install.sh
	bash build/cpu/install.sh $(CPU_ENGINE)

# The ttnn probe environment: `appliance check` counts chips with it, and its tests need it.
engine-ttnn: $(TTNN_ENGINE)/.appliance-engine-ok

$(TTNN_ENGINE)/.appliance-engine-ok: build/ttnn/requirements.txt
	$(PYTHON312) -m venv $(TTNN_ENGINE)
	$(TTNN_ENGINE)/bin/pip install --quiet --disable-pip-version-check -r build/ttnn/requirements.txt
	$(TTNN_ENGINE)/bin/python -I -c "import ttnn" > /dev/null 2>&1
	touch $@

# SERVE_ARGS: overrides for `appliance serve`, e.g. make serve SERVE_ARGS="model=tiny serving.port=8001".
serve: setup engine-cpu
	$(BIN)/appliance serve $(SERVE_ARGS)

test: lint engine-cpu engine-ttnn
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check appliance tui tests bench build engine_plugins
	$(BIN)/ruff format --check appliance tui tests bench build engine_plugins
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup engine-cpu
	$(BIN)/python bench/validate_vs_engine.py
	$(BIN)/python bench/serve_overhead.py
	$(BIN)/python bench/embedded_default.py
	$(BIN)/python bench/console_cpu.py
	$(BIN)/python bench/check_timings.py
	$(BIN)/python bench/loadgen_capacity.py
	$(BIN)/python bench/loadgen_vs_vllm_bench.py

# The reliability soak (10 minutes of the mixed workload with the console poller attached).
soak: setup engine-cpu
	PYTHONPATH=. $(BIN)/python bench/soak.py --duration 600
