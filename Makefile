# Two commands: `make demo` and `make test`. Both set up .venv from nothing but Python 3.11+.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml Makefile
	@test -n "$(PYTHON)" || { echo "stead needs Python 3.11 or newer on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,openai,anthropic,postgres]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/stead demo

# The suite starts hundreds of Python processes (CLI commands, crash children, workers); compile
# the package's bytecode once, since nothing is cached where PYTHONDONTWRITEBYTECODE is set.
# Most of its time is spent waiting (for child processes, timers, fsyncs), so it runs in JOBS
# pytest-xdist workers: two take about half the wall time of one on a 2-core machine.
# `make test JOBS=0` runs it in one process.
JOBS ?= 2
test: $(STAMP)
	$(BIN)/python -m compileall -q src tests >/dev/null
	$(BIN)/python -m pytest -q -n $(JOBS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python benchmarks/summary.py
	$(BIN)/python benchmarks/step_overhead.py
	$(BIN)/python benchmarks/peers.py
	$(BIN)/python benchmarks/phases.py
	$(BIN)/python benchmarks/idle_cpu.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/postgres.py
	$(BIN)/python benchmarks/instructions.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache stead-demo.db*
