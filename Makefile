# Two entry points: `make demo` runs the main job, `make test` runs the suite.
# Both create the project-local virtual environment on first use.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench table2 table2-quick canife clean bazel-build bazel-test

# The demo: DP-FedAvg with canaries on synthetic EMNIST-shaped data at three
# noise multipliers (configs/demo.cfg), then the combined report table.
DEMO_NOISE := 0 0.0487 0.2207
DEMO_DIR := output/demo

$(STAMP): requirements.txt scripts/check_env.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	$(PY) scripts/check_env.py
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	@for noise in $(DEMO_NOISE); do \
	  $(PY) -m experiments.train --flagfile=configs/demo.cfg \
	    --root_output_dir=$(DEMO_DIR) --run_name=noise$$noise \
	    --noise_multiplier=$$noise || exit $$?; \
	done
	@echo; echo 'Demo: privacy estimates by noise multiplier (ε_est/ε_lo per threat model)'
	@head -n 2 $(DEMO_DIR)/noise0/report.md
	@for noise in $(DEMO_NOISE); do sed -n 3p $(DEMO_DIR)/noise$$noise/report.md; done
	@echo; echo "Reports, cosine CSVs and density plots: $(DEMO_DIR)/noise*/"

table2-quick: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism --num_simulations=10

table2: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) -m benchmarks.table2
	$(PY) -m benchmarks.canary_tracking

canife: $(STAMP)
	$(PY) -m experiments.compare_canife

# Bazel (4.x, offline; see WORKSPACE and .bazelrc): build every target, and run
# the fast (numpy/scipy-only) test suite with the .venv interpreter. A machine
# without bazel gets Debian's bazel-bootstrap package (needs root or sudo).
BAZEL ?= bazel
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

bazel-build:
	@command -v $(BAZEL) >/dev/null || { \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y bazel-bootstrap; }
	$(BAZEL) build //...

bazel-test: $(STAMP) bazel-build
	$(BAZEL) test //tests:fast

clean:
	rm -rf $(VENV) .pytest_cache output
