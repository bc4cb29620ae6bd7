# The two commands a newcomer types: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo examples test lint typecheck format bench clean browser sandbox

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,eval]'
	touch $(STAMP)

# The demo's tools run in a bubblewrap sandbox (the default): Debian's package when missing.
demo: $(STAMP) sandbox
	$(BIN)/treadle demo

examples: $(STAMP)
	@bash examples/seed/demo.sh $(abspath $(BIN))/treadle

lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over src/treadle: strict on events/, store/ and api/, the default checks elsewhere
# ([tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The Canvas's browser tests drive Debian's Chromium (never a browser build downloaded by a tool).
browser:
	[ -x /usr/bin/chromium ] || (apt-get update && apt-get install -y chromium)

# The terminal's sandbox (and its escape tests) need bubblewrap; Debian's package.
sandbox:
	[ -x /usr/bin/bwrap ] || (apt-get update && apt-get install -y bubblewrap)

# PostgreSQL: $$TREADLE_TEST_POSTGRES, else the machine's at 127.0.0.1:5432, else a private server
# made for this run and removed after (tests/support/private_postgres.py).
test: lint browser sandbox
	$(BIN)/python tests/support/private_postgres.py $(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/treadle bench core

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build src/*.egg-info
