# The two entry points of the README. Both install first (scripts/install.sh skips what is done).
.PHONY: install install-tf2.18 demo test test-tf2.18 lint wheel-smoke unit integration bench clean-cluster

VENV ?= .venv
PY := $(VENV)/bin/python
# TensorFlow 2.18 (the line before the default 2.21) in a second virtualenv, `make test-tf2.18`: the tests that
# run TensorFlow or code of the training process (marker `tensorflow`: tests/tf, the unit tests of tf_hooks,
# tests/unit/conftest.py) and the Keras elastic jobs on a real cluster. Not part of `make test` (CI): its install
# and pass took 10 of CI's minutes (docs/versions.md).
VENV_TF218 ?= .venv-tf2.18
TF218_TESTS := -m "tensorflow or integration" tests/unit tests/tf tests/integration/test_keras_elastic.py
# No .pytest_cache in the checkout. pytest-xdist: the unit tests on every core; the integration modules on two
# workers, each with clusters of its own on ports of its own (tests/integration/conftest.py), which two cores
# carry because an integration test mostly waits on its cluster and jobs.
PYTEST := $(PY) -m pytest -p no:cacheprovider
PYTEST_TF218 := $(VENV_TF218)/bin/python -m pytest -p no:cacheprovider
UNIT_WORKERS ?= auto
INTEGRATION_WORKERS ?= 2
# The TensorFlow tests on two workers too: each mostly waits on a Horovod ring's start and TensorFlow's import.
TF_WORKERS ?= 2

install:
	scripts/install.sh

install-tf2.18:
	SUBMARINE_VENV=$(VENV_TF218) scripts/install.sh --tf 2.18

## Install everything, start the local pseudo-cluster and run the demo job on it.
demo: install
	$(PY) -m submarine_elastic.demo

## Install everything, then lint, type-check, check the built wheel and run the whole test suite (what CI runs):
## the unit tests on every core, tests/tf (and any other directory) and the integration tests on two workers each.
## Every pass runs even after one failed; the failed ones are named at the end.
test: install lint wheel-smoke
	failed=""; \
	$(PYTEST) -n $(UNIT_WORKERS) --durations=10 tests/unit || failed="$$failed unit"; \
	$(PYTEST) -n $(TF_WORKERS) --durations=10 --ignore=tests/unit --ignore=tests/integration || failed="$$failed tf"; \
	$(PYTEST) -n $(INTEGRATION_WORKERS) --dist loadscope --durations=25 tests/integration || failed="$$failed integration"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed" >&2; exit 1; fi

## The TensorFlow tests and the Keras elastic jobs with TensorFlow 2.18 (tf_keras 2.18, protobuf 5).
test-tf2.18: install-tf2.18
	$(PYTEST_TF218) -n $(TF_WORKERS) --dist loadscope --durations=10 $(TF218_TESTS)

## Build the wheel, install it into a fresh virtualenv and use it from outside the checkout.
wheel-smoke: install
	scripts/wheel_smoke.sh

lint:
	$(VENV)/bin/ruff check submarine_elastic tf_hooks tests benchmarks examples
	$(VENV)/bin/mypy

unit: install
	$(PYTEST) -n $(UNIT_WORKERS) tests/unit

integration: install
	$(PYTEST) -n $(INTEGRATION_WORKERS) --dist loadscope tests/integration

bench: install
	$(PY) benchmarks/bench_cluster.py
