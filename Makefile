# Herald: two commands for a newcomer with Python 3.11 and pip.
#   make run    start the local stack, play the demo, print the summary, serve until Ctrl-C
#   make test   the whole suite, integration tests against real Temporal, PostgreSQL and HTTP
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# Test processes, each taking whole files (module-scoped stacks stay in one process), longest first
# (tests/conftest.py). Most tests wait on real timers and providers, so two overlap their waits on
# 2 cores. Three took 525 and 505 s with every test passing, but a third run at 3 failed the route-
# isolation test's 5 s callback deadline (5.2-6.1 s) and a fault-matrix submit count: the suite needs
# about 800 CPU-seconds (the 2,000-report burst alone 280), and the load-sensitive tests feel a third.
TEST_WORKERS ?= 2

.PHONY: run test test-workflow venv clean soak

# The venv is rebuilt when pyproject.toml changes; everything comes from PyPI, nothing at run time.
$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c "import sys; assert sys.version_info >= (3, 11)" 2>/dev/null || { echo "error: Python 3.11+ not found: set PYTHON=/path/to/python3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,agent]'
	touch $@

venv: $(BIN)/.installed

run: venv
	$(BIN)/python -m devstack $(ARGS)

test: venv
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

# The fast workflow tier alone (tests/workflow): seconds, on the time-skipping server.
test-workflow: venv
	$(BIN)/python -m pytest -m workflow_fast $(ARGS)

clean:
	rm -rf .state .pytest_cache .hypothesis

# Benchmark, not a test: floor, naive and Herald side by side on a private stack (free ports);
# prints one table and writes bench/RESULTS.md. `make bench ARGS="--intents 200"`; see `python -m bench --help`.
.PHONY: bench
bench: venv
	$(BIN)/python -m bench $(ARGS)

# Not part of `make test`: N intents (default 10,000; ARGS="--intents 500" for a short one) through
# a seeded fault mix while workers are SIGKILLed; prints one table.
soak: venv
	$(BIN)/python -m soak $(ARGS)
