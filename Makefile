# Herald: two commands for a newcomer with Python 3.11 and pip.
#   make run    start the local stack, play the demo, print the summary, serve until Ctrl-C
#   make test   the whole suite, integration tests against real Temporal, PostgreSQL and HTTP
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# Test processes, each taking whole files (module-scoped stacks stay in one process), longest first
# (tests/longest_first.py). Most tests wait on real timers and providers: the integration tier alone
# took 389 s with two and 277 s with three, at under one core. With the 2,000-report burst in the suite
# (280 CPU-seconds), a third process failed load-sensitive tests (the route-isolation test's 5 s
# callback deadline, a fault-matrix submit count); without it the suite needs about 550 CPU-seconds.
# TEST_WORKERS=2 on a machine busy with other work; 0 runs in this process (to debug one test).
TEST_WORKERS ?= 3
# The tiers, one folder each under tests/ (README "Tests"): `make test-<tier>` runs one alone.
TIERS := unit workflow replay providers emulator receipts console integration faults browser
PYTEST = $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
.PHONY: run test test-deep $(addprefix test-,$(TIERS)) venv clean soak

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

# Every tier in one session: the CPU-bound tiers (unit, emulator) fill the time the stack tiers wait
# on their clocks, and each process starts a stack once, when its first test that needs one runs.
test: venv
	$(PYTEST) -p tests.longest_first $(ARGS)

# The whole suite with every property search at the depth it was written for (tests/depth.py: the
# suite runs a quarter of each): before a release, or after a change to the rules they search.
test-deep: venv
	HERALD_TEST_DEPTH=deep $(PYTEST) -p tests.longest_first $(ARGS)

# One tier: `make test-unit`, `make test-workflow` (seconds, on the time-skipping server: the place
# to start after a change to workflows/), ... `make test-faults`; ARGS and TEST_WORKERS as for `make test`.
$(addprefix test-,$(TIERS)): test-%: venv
	$(PYTEST) tests/$* $(ARGS)

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
