# The two commands a new user needs: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test lint typecheck unit format clean

setup: $(STAMP)

$(STAMP): pyproject.toml engine/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]' -e ./engine
	touch $(STAMP)

demo: setup
	$(BIN)/sparkgate validate config releases
	$(BIN)/sparkgate render releases/r2.yaml

lint: setup
	$(BIN)/ruff check flows tests engine
	$(BIN)/ruff format --check flows tests engine

typecheck: setup
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

format: setup
	$(BIN)/ruff format flows tests engine
	$(BIN)/ruff check --fix flows tests engine

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
