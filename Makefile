# Two commands on a fresh machine: `make demo` (quickstart, local, 2 workers) and `make test`.
# Each installs what it needs into .venv; the stamp files make re-runs instant.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# -qq: errors only (this machine's pip config otherwise warns about every missing index path).
PIP := $(BIN)/python -m pip install -qq --constraint constraints.txt
DEPS := pyproject.toml constraints.txt

.PHONY: demo test lint bench clean system

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned, so that no later resolution can pull a CUDA build.
$(VENV)/.torch: $(BIN)/python constraints.txt
	@echo "installing torch 2.13.0 (CPU) into $(VENV) ..."
	$(PIP) torch==2.13.0
	touch $@

$(VENV)/.demo: $(VENV)/.torch $(DEPS)
	@echo "installing stackbench[workloads,dashboard] ..."
	$(PIP) -e '.[workloads,dashboard]'
	touch $@

EXAMPLE_PLUGIN := examples/stackbench-example

$(VENV)/.test: $(VENV)/.torch $(DEPS) $(EXAMPLE_PLUGIN)/pyproject.toml
	@echo "installing stackbench with every extra (workloads, kubernetes, infra, report, test) ..."
	$(PIP) -e '.[workloads,kubernetes,infra,report,test]'
	@echo "installing the example plugin ($(EXAMPLE_PLUGIN)), whose tests run it ..."
	$(PIP) --no-deps --no-build-isolation -e $(EXAMPLE_PLUGIN)
	touch $@

demo: $(VENV)/.demo
	$(BIN)/runner submit cnn-digits --local --workers 2

# System packages some tests need: Debian's chromium + chromedriver (the dashboard's browser
# test), iproute2 + util-linux (shaped networks: ip, tc, nsenter) and iptables (the delay line
# of a link with a delay or loss, where the kernel has no netem). As root on Debian (CI) the
# missing ones are installed here; elsewhere those tests skip and say what to install.
SYSTEM_PACKAGES := chromedriver:chromium-driver chromium:chromium tc:iproute2 ip:iproute2 \
	iptables:iptables \
	nsenter:util-linux
system:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		PATH="$$PATH:/usr/sbin:/sbin" command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair##*:}"; \
	done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing (apt) for the browser and shaped-network tests ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# Two pytest-xdist workers, a test file each at a time (a file's module-scoped runs are built
# once): most tests wait on processes they start, so two keep a 2-core machine busy. Files in
# the order tests/conftest.py gives (heaviest first), not xdist's (most tests first).
# `make test TEST_WORKERS=0` runs the suite in one process.
TEST_WORKERS ?= 2
test: $(VENV)/.test system
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

bench: $(VENV)/.test
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/transformer_throughput.py
	$(BIN)/python bench/infra_eval.py

clean:
	rm -rf $(VENV) results .pytest_cache
