# The two entry points of the README. Both install first (scripts/install.sh skips what is done).
.PHONY: install demo test lint wheel-smoke unit integration bench clean-cluster

VENV ?= .venv
PY := $(VENV)/bin/python

install:
	scripts/install.sh

## Install everything, start the local pseudo-cluster and run the demo job on it.
demo: install
	$(PY) -m submarine_elastic.demo

## Install everything, then lint, type-check, check the built wheel and run the whole test suite (what CI runs).
test: install lint wheel-smoke
	$(PY) -m pytest

## Build the wheel, install it into a fresh virtualenv and use it from outside the checkout.
wheel-smoke: install
	scripts/wheel_smoke.sh

lint:
	$(VENV)/bin/ruff check submarine_elastic tf_hooks tests benchmarks examples
	$(VENV)/bin/mypy

unit: install
	$(PY) -m pytest tests/unit

integration: install
	$(PY) -m pytest tests/integration

bench: install
	$(PY) benchmarks/bench_cluster.py
