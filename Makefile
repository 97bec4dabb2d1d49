# Two commands on a fresh machine: `make demo` (quickstart, local, 2 workers) and `make test`.
# Each installs what it needs into .venv; the stamp files make re-runs instant.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --constraint constraints.txt
DEPS := pyproject.toml constraints.txt

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned, so that no later resolution can pull a CUDA build.
$(VENV)/.torch: $(BIN)/python constraints.txt
	$(PIP) torch==2.13.0
	touch $@

$(VENV)/.demo: $(VENV)/.torch $(DEPS)
	$(PIP) -e '.[workloads]'
	touch $@

$(VENV)/.test: $(VENV)/.torch $(DEPS)
	$(PIP) -e '.[workloads,kubernetes,infra,test]'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/runner submit cnn-digits --local --workers 2

test: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(VENV)/.test
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) results .pytest_cache
