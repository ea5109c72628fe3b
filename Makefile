# Two commands on a fresh machine: `make serve` (embedded default) and `make test` (everything).
# While editing: `make test-fast` (no engine, about 2 min) and `make test-engine` (the engine tier, about
# 21 min, nearly all of it engine boots: README, Tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CPU_ENGINE := .engines/cpu
TTNN_ENGINE := .engines/ttnn
# The gateway's balancer (Debian's haproxy); the tests front two appliances with it.
HAPROXY := /usr/sbin/haproxy
# Prometheus and promtool (Debian's prometheus): the tests check and unit-test the rendered config and rules with
# promtool, and scrape a real appliance with Prometheus.
PROMETHEUS := /usr/bin/prometheus
# systemd's tools (Debian's systemd): the tests verify the rendered unit and rate its sandbox with them.
SYSTEMD_ANALYZE := /usr/bin/systemd-analyze
# checkov, the manifests' policy check (tests/test_k8s_hardening.py), in a venv of its own: its
# dependencies (boto3, networkx, aiohttp and many more) are no business of the appliance's pins.
CHECKOV_VERSION := 3.3.30
CHECKOV := .tools/checkov
# ansible-core, which rolls a site's upgrade (tests/test_upgrade_fleet.py), in a venv of its own: 2.19 is the
# last series that runs on Python 3.11.
ANSIBLE_VERSION := 2.19.14
ANSIBLE := .tools/ansible
# ttnn publishes wheels for Python 3.10 and 3.12 only; pyenv provides 3.12 here.
PYTHON312 ?= PYENV_VERSION=3.12.1 python3.12
# Where the environment sets PYTHONDONTWRITEBYTECODE (this sandbox does), every process would compile
# the project's modules and pytest would rewrite every test module's asserts again: a pytest worker's
# collection took 5.9 s CPU that way, 4.0 s with the bytecode a previous run wrote (__pycache__/).
unexport PYTHONDONTWRITEBYTECODE


.PHONY: serve test test-fast test-engine lint bench soak engine-cpu engine-ttnn setup haproxy systemd-tools checkov ansible prometheus

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

checkov: $(CHECKOV)/.installed-$(CHECKOV_VERSION)

$(CHECKOV)/.installed-$(CHECKOV_VERSION):
	$(PYTHON) -m venv $(CHECKOV)
	$(CHECKOV)/bin/pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)
	touch $@

ansible: $(ANSIBLE)/.installed-$(ANSIBLE_VERSION)

$(ANSIBLE)/.installed-$(ANSIBLE_VERSION):
	$(PYTHON) -m venv $(ANSIBLE)
	$(ANSIBLE)/bin/pip install --quiet --disable-pip-version-check ansible-core==$(ANSIBLE_VERSION)
	touch $@

haproxy: $(HAPROXY)

$(HAPROXY):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy > /dev/null

prometheus: $(PROMETHEUS)

$(PROMETHEUS):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus > /dev/null

systemd-tools: $(SYSTEMD_ANALYZE)

$(SYSTEMD_ANALYZE):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd > /dev/null

# SERVE_ARGS: overrides for `appliance serve`, e.g. make serve SERVE_ARGS="model=tiny serving.port=8001".
serve: setup engine-cpu
	$(BIN)/appliance serve $(SERVE_ARGS)

# The fast tier in parallel: three workers on two cores, because a third of its time is tests
# waiting on fake engines' timers (supervisor faults, readiness); work stealing evens the workers out.
PARALLEL := -n 3 --dist worksteal

# CI: lint, then both tiers, with the "ci" Hypothesis profile (1,000 examples per generated-input
# test). The engine tier runs serially: its tests pin engines to cores and time boots and drains.
test: lint engine-cpu engine-ttnn haproxy systemd-tools checkov ansible prometheus
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -m "not engine" $(PARALLEL)
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -m engine

# Every test that runs no engine environment (the "dev" Hypothesis profile: 120 examples).
test-fast: setup systemd-tools checkov ansible prometheus
	$(BIN)/pytest -m "not engine" $(PARALLEL)

# Every test that boots an engine or runs an engine environment's interpreter (tests/conftest.py).
test-engine: setup engine-cpu engine-ttnn haproxy ansible prometheus
	$(BIN)/pytest -m engine

lint: setup
	$(BIN)/ruff check appliance tui tests bench build engine_plugins
	$(BIN)/ruff format --check appliance tui tests bench build engine_plugins
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup engine-cpu
	$(BIN)/python bench/validate_vs_engine.py
	$(BIN)/python bench/verdict_time.py
	PYTHONPATH=. $(BIN)/python bench/config_probe_time.py
	PYTHONPATH=. $(BIN)/python bench/upgrade_time.py
	PYTHONPATH=. $(BIN)/python bench/serve_overhead.py
	PYTHONPATH=. $(BIN)/python bench/embedded_default.py
	PYTHONPATH=. $(BIN)/python bench/console_cpu.py
	PYTHONPATH=. $(BIN)/python bench/control_latency.py
	$(BIN)/python bench/check_timings.py
	$(BIN)/python bench/loadgen_capacity.py
	$(BIN)/python bench/loadgen_vs_vllm_bench.py
	$(BIN)/python bench/scheduler_stalls.py

# The reliability soak (10 minutes of the mixed workload, the console poller attached, one engine restart).
soak: setup engine-cpu
	PYTHONPATH=. $(BIN)/python bench/soak.py --duration 600
