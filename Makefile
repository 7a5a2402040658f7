# The two entry points of the README. Both install first (scripts/install.sh skips what is done).
.PHONY: install demo test lint unit integration bench clean-cluster

VENV ?= .venv
PY := $(VENV)/bin/python

install:
	scripts/install.sh

## Install everything, start the local pseudo-cluster and run the demo job on it.
demo: install
	$(PY) -m submarine_elastic.demo

## Install everything, then lint, type-check and run the whole test suite (what CI runs).
test: install lint
	$(PY) -m pytest

lint:
	$(VENV)/bin/ruff check submarine_elastic tf_hooks tests benchmarks examples
	$(VENV)/bin/mypy

unit: install
	$(PY) -m pytest tests/unit

integration: install
	$(PY) -m pytest tests/integration

bench: install
	$(PY) benchmarks/bench_cluster.py
