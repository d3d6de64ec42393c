# Two entry points: `make demo` runs the main job, `make test` runs the suite.
# Both create the project-local virtual environment on first use.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench table2 clean

$(STAMP): requirements.txt scripts/check_env.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	$(PY) scripts/check_env.py
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism --num_simulations=10

table2: $(STAMP)
	$(PY) -m experiments.gaussian_mechanism

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) -m benchmarks.table2

clean:
	rm -rf $(VENV) .pytest_cache
