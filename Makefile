# podtailor developer entry points. `make test` and `make demo` work on a fresh Debian machine:
# scripts/setup.sh installs Debian packages, the virtualenv and the control plane build first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
SEEDS ?= 1

.PHONY: setup test unit lint demo demo-down bench soak clean help

help:
	@echo "make test   - install everything, lint (ruff, mypy), run the whole suite against a real local cluster"
	@echo "make demo   - bring up the local cluster (real control plane + Prometheus) and run the demo"
	@echo "make bench  - run the benchmarks and write tests/benchmarks/RESULTS.md"
	@echo "make lint   - ruff, mypy, import contracts and the 400-line module cap"
	@echo "make unit   - unit tests only (no servers)"
	@echo "make soak   - recommender and updater for minutes on a fast clock, faults, then a journal audit"
	@echo "              (SEEDS=N: N seeds one after another, from seed 7)"

setup:
	@bash scripts/setup.sh

lint: setup
	$(VENV)/bin/ruff check podtailor recommender updater tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict tests/harness tests/nodesim tests/benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy --strict scripts/check_module_size.py
	$(PY) scripts/check_module_size.py

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

demo:
	@bash scripts/setup.sh --demo
	$(PY) scripts/demo.py

demo-down:
	$(PY) -m tests.harness down

bench: setup
	$(PY) -m tests.benchmarks

soak: setup
	$(PY) -m tests.soak --minutes 5 --seeds $(SEEDS)

clean:
	rm -rf .cluster .pytest_cache .mypy_cache .ruff_cache
