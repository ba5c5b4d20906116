# The two commands a new user needs: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test lint typecheck unit format clean

setup: $(STAMP)

# uv installs the same packages as pip about eight times faster (a minute off a fresh `make
# demo`); it trusts the system's CA bundle like pip does. Where uv cannot resolve (an index only
# pip is configured for), pip does the install instead. Bytecode is compiled at install, as pip
# does: where PYTHONDONTWRITEBYTECODE is set nothing writes it later, and every command then
# compiled Prefect from source (+8 s here once; each command's imports 4.0 s -> 2.3 s).
$(STAMP): pyproject.toml engine/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python --native-tls -e '.[dev]' -e ./engine \
	  || $(BIN)/python -m pip install -q -e '.[dev]' -e ./engine
	touch $(STAMP)

# Qualify the baseline r1, measure this machine's boot-to-boot noise with an A/A calibration of
# r1 (the workloads that gate: what r2's benchmark decides on), then qualify r2 against r1, on
# the local two-node cluster; the records land in experiments/ (`--no-wait`: end "awaiting
# promotion" instead of waiting for a person).
demo:
	@date +%s > .demo-started
	@$(MAKE) --no-print-directory setup
	$(BIN)/sparkgate validate config releases
	$(BIN)/sparkgate qualify releases/r1.yaml --no-wait
	$(BIN)/sparkgate calibrate releases/r1.yaml --arms 3 --gated-only
# r2's outcome is the demo's, but its summary prints either way: a new user who saw r2 fail
# still gets the records, the calibration and the wall time.
	$(BIN)/sparkgate qualify releases/r2.yaml --no-wait; status=$$?; echo; \
	  $(BIN)/sparkgate records --brief; \
	  echo "demo wall time: $$(( $$(date +%s) - $$(cat .demo-started) )) s, set-up included"; \
	  echo; echo "next (after: source $(VENV)/bin/activate):"; \
	  echo "  sparkgate show r2                           # r2's record: verdict, every gate's tables"; \
	  echo "  sparkgate records                           # every record, its verdict and decision"; \
	  echo "  sparkgate promote r2 --reason 'demo'        # promote r2 on the local cluster"; \
	  echo "  PREFECT_HOME=.sparkgate/prefect prefect server start   # the UI at http://127.0.0.1:4200"; \
	  exit $$status

lint: setup
	$(BIN)/ruff check flows tests engine
	$(BIN)/ruff format --check flows tests engine

typecheck: setup
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

# The fast loop while editing: unit tests of sparkgate and the engine, nothing that boots a real
# cluster, a lab host, a docker daemon or a Prefect server (no lint or type check; `make test`
# runs everything).
unit: setup
	$(BIN)/pytest tests/unit engine/tests \
	  -m "not integration and not lab and not docker and not slow and not prefect_server" \
	  $(PYTEST_ARGS)

format: setup
	$(BIN)/ruff format flows tests engine
	$(BIN)/ruff check --fix flows tests engine

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
