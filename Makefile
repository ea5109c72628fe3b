# Two commands on a fresh machine: `make serve` (embedded default) and `make test` (everything).
# Set-up: pip installs uv and rich into .tools/setup (`tools`, hash-locked); uv then builds the
# environments, the independent ones at once, as steps with one progress display
# (build/setup/run_steps.py: rich rows on a terminal, one line per step otherwise; logs in .tools/logs).
# While editing: `make test-fast` (no engine, about 2 min) and `make test-engine` (the engine tier, about
# 14 min on two workers, mostly engine boots: docs/development/tests.md). `make docs` builds the documentation
# site into site/.
PYTHON ?= python3
TOOLS := .tools/setup
UV := $(CURDIR)/$(TOOLS)/bin/uv
STEPS = $(TOOLS)/bin/python build/setup/run_steps.py --make "$(MAKE)" --logs .tools/logs
VENV := .venv
BIN := $(VENV)/bin
CPU_ENGINE := .engines/cpu
TTNN_ENGINE := .engines/ttnn
# The gateway's balancer (Debian's haproxy); the tests front two appliances with it.
HAPROXY := /usr/sbin/haproxy
# Debian's nginx: the weights tests serve a mirror with it (Range requests, faults) and read its access log.
NGINX := /usr/sbin/nginx
# Prometheus and promtool (Debian's prometheus): the tests check and unit-test the rendered config and rules with
# promtool, and scrape a real appliance with Prometheus.
PROMETHEUS := /usr/bin/prometheus
# Debian's chromium: the docs test opens the built site in it, headless (tests/docs/test_docs_site.py).
CHROMIUM := /usr/bin/chromium
# systemd's tools (Debian's systemd): the tests verify the rendered unit and rate its sandbox with them.
SYSTEMD_ANALYZE := /usr/bin/systemd-analyze
# checkov, the manifests' policy check (tests/deploy/test_k8s_hardening.py), in a venv of its own: its
# dependencies (boto3, networkx, aiohttp and many more) are no business of the appliance's pins.
CHECKOV_VERSION := 3.3.30
CHECKOV := .tools/checkov
# ansible-core, which rolls a site's upgrade (tests/rollout/test_upgrade_fleet.py), in a venv of its own: 2.19 is the
# last series that runs on Python 3.11.
ANSIBLE_VERSION := 2.19.14
ANSIBLE := .tools/ansible
# ttnn publishes wheels for Python 3.10 and 3.12 only; pyenv provides 3.12 here.
PYTHON312 ?= PYENV_VERSION=3.12.1 python3.12
# Where the environment sets PYTHONDONTWRITEBYTECODE (this sandbox does), every process would compile
# the project's modules and pytest would rewrite every test module's asserts again: a pytest worker's
# collection took 5.9 s CPU that way, 4.0 s with the bytecode a previous run wrote (__pycache__/).
unexport PYTHONDONTWRITEBYTECODE


.PHONY: serve test test-environments test-fast test-engine lint bench soak engine-cpu engine-ttnn setup tools haproxy nginx systemd-tools checkov ansible prometheus chromium docs

# The set-up steps, as "title=target" for $(STEPS).
APPLIANCE_STEP := "appliance venv=$(VENV)/.installed"
CPU_STEP := "cpu engine=$(CPU_ENGINE)/.appliance-engine-ok"
TTNN_STEP := "ttnn environment=$(TTNN_ENGINE)/.appliance-engine-ok"
CHECKOV_STEP := "checkov=$(CHECKOV)/.installed-$(CHECKOV_VERSION)"
ANSIBLE_STEP := "ansible=$(ANSIBLE)/.installed-$(ANSIBLE_VERSION)"

# The bootstrap: the only pip install left, a few seconds (uv is one static binary). The interpreter's own pip
# installs into a venv without one (`pip --python`, pip >= 22.3): ensurepip cost 4.7 s of a 9.8 s step.
tools: $(TOOLS)/.installed

$(TOOLS)/.installed: build/setup/requirements.lock
	@echo "[setup] tools: uv and rich into $(TOOLS) (pip, hash-locked)"
	$(PYTHON) -m venv --without-pip $(TOOLS)
	$(PYTHON) -m pip --python $(TOOLS)/bin/python install --quiet --disable-pip-version-check --no-deps --require-hashes -r build/setup/requirements.lock
	touch $@

setup: tools
	@$(STEPS) $(APPLIANCE_STEP)

$(VENV)/.installed: pyproject.toml | $(TOOLS)/.installed
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(UV) pip install -e '.[dev]'
	touch $@

engine-cpu: tools
	@$(STEPS) $(CPU_STEP)

$(CPU_ENGINE)/.appliance-engine-ok: build/cpu/requirements.txt build/cpu/requirements.lock build/cpu/install.sh build/cpu/engine_site.py | $(TOOLS)/.installed
	UV=$(UV) bash build/cpu/install.sh $(CPU_ENGINE)

# The ttnn probe environment: `appliance check` counts chips with it, and its tests need it.
engine-ttnn: tools
	@$(STEPS) $(TTNN_STEP)

$(TTNN_ENGINE)/.appliance-engine-ok: build/ttnn/requirements.txt | $(TOOLS)/.installed
	$(PYTHON312) -m venv $(TTNN_ENGINE)
	$(UV) pip install --python $(TTNN_ENGINE)/bin/python -r build/ttnn/requirements.txt
	$(TTNN_ENGINE)/bin/python -I -c "import ttnn" > /dev/null 2>&1
	touch $@

checkov: tools
	@$(STEPS) $(CHECKOV_STEP)

$(CHECKOV)/.installed-$(CHECKOV_VERSION): | $(TOOLS)/.installed
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(CHECKOV)
	$(UV) pip install --python $(CHECKOV)/bin/python checkov==$(CHECKOV_VERSION)
	touch $@

ansible: tools
	@$(STEPS) $(ANSIBLE_STEP)

$(ANSIBLE)/.installed-$(ANSIBLE_VERSION): | $(TOOLS)/.installed
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(ANSIBLE)
	$(UV) pip install --python $(ANSIBLE)/bin/python ansible-core==$(ANSIBLE_VERSION)
	touch $@

haproxy: $(HAPROXY)

$(HAPROXY):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy > /dev/null

nginx: $(NGINX)

$(NGINX):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx > /dev/null

prometheus: $(PROMETHEUS)

$(PROMETHEUS):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus > /dev/null

chromium: $(CHROMIUM)

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null

systemd-tools: $(SYSTEMD_ANALYZE)

$(SYSTEMD_ANALYZE):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd > /dev/null

# SERVE_ARGS: overrides for `appliance serve`, e.g. make serve SERVE_ARGS="model=tiny serving.port=8001".
# The appliance's venv and the CPU engine are built at once; the model is built by `serve` itself.
serve: tools
	@$(STEPS) $(APPLIANCE_STEP) $(CPU_STEP)
	$(BIN)/appliance serve $(SERVE_ARGS)

# The fast tier in parallel: three workers on two cores, because a third of its time is tests
# waiting on fake engines' timers (supervisor faults, readiness); work stealing evens the workers out.
PARALLEL := -n 3 --dist worksteal
# The engine tier on two workers: run serially it left 37 % of the two cores idle (16 min 45 s); on two it took
# 13 min 30 s, every test passing. Each shared appliance's tests form one xdist group (tests/conftest.py),
# so under `loadgroup` each appliance is still booted once.
ENGINE_PARALLEL := -n 2 --dist loadgroup

# CI: lint, then both tiers, with the "ci" Hypothesis profile (1,000 examples per generated-input test, 500 site files).
# Each tier prints its time against its budget (build/setup/tier.sh): 30 minutes in all on a fresh 2-core machine,
# divided by what each tier took in fresh clones of sessions 24 and 25: lint 13-24 s, the fast tier 2 min 54 s to
# 3 min 37 s (1,693 tests, bound by CPU), the engine tier 13-15 min on two workers (session 25). Set-up keeps
# its 150 s for a machine that must still install Debian's packages (2 min 9 s measured on one in issue 53).
TIER := build/setup/tier.sh
test:
	@$(TIER) set-up 150 $(MAKE) --no-print-directory test-environments haproxy nginx systemd-tools prometheus chromium
	@$(TIER) lint 60 $(MAKE) --no-print-directory lint
	@$(TIER) fast 240 env HYPOTHESIS_PROFILE=ci $(BIN)/pytest -m "not engine" $(PARALLEL)
	@$(TIER) engine 1350 env HYPOTHESIS_PROFILE=ci $(BIN)/pytest -m engine $(ENGINE_PARALLEL)

test-environments: tools
	@$(STEPS) $(APPLIANCE_STEP) $(CPU_STEP) $(TTNN_STEP) $(CHECKOV_STEP) $(ANSIBLE_STEP)

# Every test that runs no engine environment (the "dev" Hypothesis profile: 120 examples).
test-fast: tools nginx systemd-tools prometheus chromium
	@$(STEPS) $(APPLIANCE_STEP) $(CHECKOV_STEP) $(ANSIBLE_STEP)
	$(BIN)/pytest -m "not engine" $(PARALLEL)

# Every test that boots an engine or runs an engine environment's interpreter (tests/conftest.py).
test-engine: tools haproxy prometheus
	@$(STEPS) $(APPLIANCE_STEP) $(CPU_STEP) $(TTNN_STEP) $(ANSIBLE_STEP)
	$(BIN)/pytest -m engine $(ENGINE_PARALLEL)

# The documentation site, strictly (a broken link, anchor or page, a command without help text or a config key
# without a description fails with one line naming it), into site/: its reference pages and pictures are made from
# the code by the build (docsgen/).
docs: setup
	$(BIN)/python -m docsgen

lint: setup
	$(BIN)/ruff check appliance tui tests testkit bench build engine_plugins docsgen
	$(BIN)/ruff format --check appliance tui tests testkit bench build engine_plugins docsgen
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
	PYTHONPATH=. $(BIN)/python bench/gateway_step.py
	$(BIN)/python bench/check_timings.py
	$(BIN)/python bench/loadgen_capacity.py
	$(BIN)/python bench/loadgen_vs_vllm_bench.py
	$(BIN)/python bench/scheduler_stalls.py
	PYTHONPATH=. $(BIN)/python bench/weights.py

# The reliability soak (bench/soak.py): 10 minutes of the mixed workload on the embedded default, the console's poller
# and `appliance status` attached, one engine restart; its figures printed and written to .cache/soak-<time>/, and
# exit 1 naming each target missed. The short form: make soak SOAK_ARGS="--duration 60" (tests/bench/test_soak.py runs one).
SOAK_ARGS ?=
soak: setup engine-cpu
	PYTHONPATH=. $(BIN)/python bench/soak.py --duration 600 $(SOAK_ARGS)
